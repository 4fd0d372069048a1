"""Runs inside a script job (see run.py): times one training step's
communication for a ~25M-parameter model two ways on the same session:
  package: the gradients go through gradstream.torch as in training
           (per-tensor push from ParameterServer, step(): wait, clock, pull
           into the parameters in place);
  direct:  the same calls straight on libgradstream_c (gs_push per tensor,
           gs_wait_pushes, gs_advance_clock, gs_pull), i.e. the C++ PsClient
           with nothing but a ctypes call in between.
Backward is left out of both (the gradients are precomputed) so only what
the package adds is compared."""

import argparse
import ctypes
import statistics
import time

import torch
import torch.nn as nn

import gradstream.torch as gs
from gradstream import _lib


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--width", type=int, default=2500)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()
    gs.init()
    model = nn.Sequential(*[nn.Linear(args.width, args.width) for _ in range(args.layers)])
    params = [p for p in model.parameters()]
    n = sum(p.numel() for p in params)
    ps = gs.ParameterServer(model)
    grads = [torch.randn_like(p) * 1e-3 for p in params]
    s = gs._session()
    lib, h = s.lib, s.handle

    def package_step():
        for i, g in enumerate(grads):
            ps._push(i, g)   # what the backward hook does with each gradient
        ps.step()

    ptrs = (ctypes.c_void_p * len(params))(*[p.data.data_ptr() for p in params])

    def direct_step():
        for i, g in enumerate(grads):
            _lib.check(lib, lib.gs_push(h, i, g.data_ptr(), g.numel(), s.clock))
        _lib.check(lib, lib.gs_wait_pushes(h, 60000))
        s.clock += 1
        _lib.check(lib, lib.gs_advance_clock(h, s.clock))
        _lib.check(lib, lib.gs_pull(h, s.clock, ptrs, 600000))

    times = {"package": [], "direct": []}
    for step in range(2 * args.steps + 2):
        kind = "package" if step % 2 == 0 else "direct"  # interleaved: same conditions
        t = time.perf_counter()
        (package_step if kind == "package" else direct_step)()
        if step >= 2:
            times[kind].append(time.perf_counter() - t)
    pkg, direct = statistics.median(times["package"]), statistics.median(times["direct"])
    print("model %d parameters (%d tensors), %d steps each" % (n, len(params), args.steps))
    print("direct (libgradstream_c / PsClient): median step %.1f ms" % (1e3 * direct))
    print("package (gradstream.torch):          median step %.1f ms" % (1e3 * pkg))
    # Each package step is paired with the direct step right after it.
    ratios = [d / p for p, d in zip(times["package"], times["direct"])]
    print("package speed relative to direct (median of %d paired ratios): %.3fx" %
          (len(ratios), statistics.median(ratios)))


if __name__ == "__main__":
    main()
