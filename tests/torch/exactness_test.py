#!/usr/bin/env python3
"""Exactness: one step with codec none on 2 workers equals, within 1e-6
relative, a torch reference that averages the two gradients and applies the
same update (SGD, momentum, AdaGrad), through the real processes and the CLI;
and the forward after the step waits per module for what it reads.
--device cuda: the model on the GPU (gradients leave through pinned host
buffers, pulled values come back to the GPU) against a reference on the same
GPU; exits 77 (skip) where torch sees no CUDA device."""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def reference(runs, optimizer, lr, device):
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
    sys.path.insert(0, os.path.join(HERE, "scripts"))
    import gradstream.torch as gs
    import one_step
    model, _, _ = one_step.model_and_batch(0, device)
    with torch.no_grad():
        for p, v in zip(model.parameters(), runs[0]["before"]):
            p.copy_(v)
    grads = []
    for r in runs:
        model.zero_grad()
        F.cross_entropy(model(r["x"]), r["y"]).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for p, g0, g1 in zip(model.parameters(), grads[0], grads[1]):
        p.grad = (g0 + g1) / 2
    opt = gs.local_optimizer(model.parameters(), optimizer=optimizer, lr=lr)
    opt.step()
    return [p.detach() for p in model.parameters()]


def main():
    args = cluster.main_args(device=True)
    cluster.require_torch()
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        return cluster.SKIP
    failures = []
    with cluster.Cluster(args.build, workers=2) as c:
        for optimizer, lr in (("sgd", 0.1), ("momentum", 0.05), ("adagrad", 0.1)):
            out = tempfile.mkdtemp(prefix="gs-exact-")
            job = c.submit("--name=exact-" + optimizer, "--workers=2", "--codec=none",
                           "--consistency=sync", "--optimizer=" + optimizer, "--lr=%g" % lr,
                           "--entrypoint", "%s %s --out %s --device %s" % (
                               sys.executable, os.path.join(HERE, "scripts", "one_step.py"), out,
                               args.device))
            st = c.wait_job(job, timeout=90)
            if st["state"] != "COMPLETED":
                raise AssertionError("job %s: %s %s" % (job, st["state"], st.get("message")))
            runs = [torch.load(os.path.join(out, "rank%d.pt" % r)) for r in (0, 1)]
            want_path = "host-from-cuda" if args.device == "cuda" else "host"
            for r in runs:
                if r["encode_path"] != want_path or not r["device"].startswith(args.device):
                    failures.append("%s: rank %d encoded on %s with parameters on %s, want %s "
                                    "on %s" % (optimizer, r["rank"], r["encode_path"], r["device"],
                                               want_path, args.device))
            # [layer-wise wait]: the forward after the step waited for the
            # first Linear's weight and bias, then the second's -- each
            # module for the parameters it reads, in forward order.
            for r in runs:
                if r["waits"] != [[0, 1], [2, 3]]:
                    failures.append("%s: rank %d's forward waited for %s, want [[0, 1], [2, 3]]"
                                    % (optimizer, r["rank"], r["waits"]))
            for i, (a, b) in enumerate(zip(runs[0]["before"], runs[1]["before"])):
                assert torch.equal(a, b), "ranks pulled different initial tensor %d" % i
            want = reference(runs, optimizer, lr, args.device)
            worst = 0.0
            for r in runs:
                for got, ref in zip(r["after"], want):
                    worst = max(worst, ((got - ref).norm() / ref.norm()).item())
                    # elementwise relative, where the value is not tiny
                    mask = ref.abs() > 1e-3
                    if mask.any():
                        worst = max(worst, ((got - ref).abs()[mask] / ref.abs()[mask]).max().item())
            moved = max((a - b).abs().max().item() for a, b in zip(runs[0]["after"],
                                                                  runs[0]["before"]))
            print("%-8s lr %-5g: max relative difference to the torch reference %.2e "
                  "(parameters moved by up to %.3g)" % (optimizer, lr, worst, moved))
            if not (worst <= 1e-6 and moved > 0):
                failures.append("%s differs from the reference by more than 1e-6" % optimizer)
    if failures:
        print("FAIL: %s" % "; ".join(failures))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
