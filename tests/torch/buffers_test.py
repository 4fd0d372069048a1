#!/usr/bin/env python3
"""Buffers, without a cluster (see [buffers] in gradstream/parameter_server.py): the
package names a model's floating-point buffers (BatchNorm's running
statistics, not its integer counter), warns about them once with
BufferWarning in a job and not single-process, and the recipe [buffers]
gives for recomputing BatchNorm statistics does recompute them."""

import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

check = cluster.check


def main():
    args = cluster.main_args()
    cluster.require_torch()
    cluster.package_without_cluster(args.build)
    import torch
    import torch.nn as nn
    import gradstream.torch as gs
    from gradstream.parameter_server import _warn_unsynced_buffers

    bn = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4 * 16, 2))
    check(gs.unsynced_buffers(bn) == ["1.running_mean", "1.running_var"],
          "buffers of a BatchNorm model: %s" % gs.unsynced_buffers(bn))
    plain = nn.Linear(3, 2)
    check(gs.unsynced_buffers(plain) == [], "a Linear has no buffers")

    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        _warn_unsynced_buffers(bn)
        _warn_unsynced_buffers(plain)
    check(len(got) == 1 and issubclass(got[0].category, gs.BufferWarning)
          and "1.running_mean, 1.running_var" in str(got[0].message),
          "one BufferWarning naming the buffers: %s" % [str(w.message) for w in got])

    # Single-process nothing is left out: no warning.
    gs.init()
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        gs.ParameterServer(bn, optimizer="sgd", lr=0.1)
    check(not [w for w in got if issubclass(w.category, gs.BufferWarning)],
          "single-process ParameterServer warned: %s" % [str(w.message) for w in got])

    # The recipe: cumulative average over a few batches in train() mode.
    torch.manual_seed(0)
    batches = [torch.randn(8, 3, 6, 6) * 2 + 1 for _ in range(4)]
    norm = bn[1]
    norm.momentum = None
    norm.reset_running_stats()
    bn.train()
    with torch.no_grad():
        for x in batches:
            bn(x)
    bn.eval()
    with torch.no_grad():
        conv = [bn[0](x) for x in batches]
    want = torch.stack([c.mean(dim=(0, 2, 3)) for c in conv]).mean(0)
    check(torch.allclose(norm.running_mean, want, atol=1e-5),
          "recomputed running_mean %s, want %s" % (norm.running_mean, want))
    print("buffers_test: ok")


if __name__ == "__main__":
    main()
