#!/usr/bin/env python3
"""The package on a GPU: a 2-worker job of a small CNN whose parameters live
on the GPU, with the job's defaults (compressed pushes and pulls under the
precision guard), trains -- the loss of the last 10 steps under half that of
the first 10 -- through the host-from-cuda path, and every rank ends with
its parameters on the GPU, the same on both ranks. Exits 77 (skip) where
torch sees no CUDA device."""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
check = cluster.check
STEPS = 80


def main():
    args = cluster.main_args(device=True)  # --device cpu checks the test itself
    cluster.require_torch()
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        return cluster.SKIP
    out = os.path.join(tempfile.mkdtemp(prefix="gs-cuda-"), "train")
    with cluster.Cluster(args.build, workers=2) as c:
        job = c.submit("--name=cuda-train", "--workers=2", "--entrypoint",
                       "%s %s --steps %d --device %s --out %s" % (
                           sys.executable, os.path.join(HERE, "scripts", "cuda_train.py"),
                           STEPS, args.device, out))
        st = c.wait_job(job, timeout=300)
        check(st["state"] == "COMPLETED", "the job completed: %s %s" % (st["state"],
                                                                      st.get("message")))
    runs = [torch.load("%s.rank%d.pt" % (out, r)) for r in (0, 1)]
    for r in runs:
        first = sum(r["losses"][:10]) / 10
        last = sum(r["losses"][-10:]) / 10
        print("rank %d: %s, parameters on %s, loss %.3f -> %.3f, %s" % (
            r["rank"], r["encode_path"], r["device"], first, last,
            {k: r["stats"][k] for k in sorted(r["stats"]) if "bytes" in k}))
        want = "host-from-cuda" if args.device == "cuda" else "host"
        check(r["encode_path"] == want, "encode path %s, want %s" % (r["encode_path"], want))
        check(r["device"].startswith(args.device), "parameters stayed on %s" % args.device)
        check(last < 0.5 * first, "the loss fell by half: %.3f -> %.3f" % (first, last))
    gap = max((a - b).abs().max().item() for a, b in zip(runs[0]["params"], runs[1]["params"]))
    print("largest difference between the ranks' final parameters: %.3g" % gap)
    check(gap == 0, "sync: both ranks hold the same parameters after synchronize()")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
