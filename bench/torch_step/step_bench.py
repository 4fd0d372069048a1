"""The package side of the torch_step bench (see run.py): runs inside a
script job, times one training step's communication through the
gradstream.torch package for a ~25M-parameter model (the gradients go
through ParameterServer as in training: one push per tensor as the backward
hook makes it, then step(): wait, clock, pull into the parameters in place),
in lock-step with torch_step_cpp, which makes the same step directly on the
C++ PsClient in another job on the same shards (FIFOs in --pair_dir): each
pair is one step of each, the package's first in even pairs, the C++ one's
first in odd pairs.
Backward is left out (the gradients are precomputed) so only what the
package adds is compared. Both sides also report the minor page faults
their process took per step: run.py starts both with the same malloc
settings, and the counts show it held (see run.py's NOTE: [torch_step
malloc])."""

import argparse
import os
import resource
import statistics
import time

import torch
import torch.nn as nn

import gradstream.torch as gs

WARMUP = 2  # pairs not counted


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10, help="timed pairs")
    ap.add_argument("--width", type=int, default=2500)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--pair_dir", required=True)
    args = ap.parse_args()
    gs.init()
    torch.manual_seed(1)
    model = nn.Sequential(*[nn.Linear(args.width, args.width) for _ in range(args.layers)])
    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    ps = gs.ParameterServer(model)
    grads = [torch.randn_like(p) * 1e-3 for p in params]

    def package_step():
        for i, g in enumerate(grads):
            ps._push(i, g)   # what the backward hook does with each gradient
        ps.step()

    pkg, cpp, pkg_faults, cpp_faults = [], [], [], []
    # Open order matches torch_step_cpp's (to_cpp, then to_py): no deadlock.
    with open(os.path.join(args.pair_dir, "to_cpp"), "w") as to_cpp, \
            open(os.path.join(args.pair_dir, "to_py")) as to_py:
        def cpp_step():
            to_cpp.write("step\n")
            to_cpp.flush()
            took, faults = to_py.readline().split()
            if float(took) < 0:
                raise SystemExit("torch_step_cpp: its step failed (see its worker's log)")
            return float(took), int(faults)

        def timed_package_step():
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t = time.perf_counter()
            package_step()
            took = time.perf_counter() - t
            return took, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults

        for step in range(WARMUP + args.steps):
            # Pairs alternate which goes first (ABBA), so whatever one step
            # leaves behind on the shards weighs on both sides alike.
            if step % 2 == 0:
                p = timed_package_step()
                c = cpp_step()
            else:
                c = cpp_step()
                p = timed_package_step()
            if step >= WARMUP:
                pkg.append(p[0])
                cpp.append(c[0])
                pkg_faults.append(p[1])
                cpp_faults.append(c[1])
        to_cpp.write("stop\n")
    print("model %d parameters (%d tensors), %d paired steps" % (n, len(params), args.steps))
    print("C++ PsClient (torch_step_cpp):  median step %.1f ms, %d page faults" %
          (1e3 * statistics.median(cpp), statistics.median(cpp_faults)))
    print("package (gradstream.torch):     median step %.1f ms, %d page faults" %
          (1e3 * statistics.median(pkg), statistics.median(pkg_faults)))
    ratios = [c / p for p, c in zip(pkg, cpp)]
    print("package speed relative to C++ PsClient (median of %d per-pair ratios): %.3fx" %
          (len(ratios), statistics.median(ratios)), flush=True)


if __name__ == "__main__":
    main()
