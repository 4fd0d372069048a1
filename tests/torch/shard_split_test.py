#!/usr/bin/env python3
"""gs.shard's split of a pass, without a cluster: with a global batch every
clock consumes the same samples whatever the world size (the ranks' pieces
of a step are disjoint and make up the global batch), every rank makes the
same number of clocks per pass, a last piece too small for every rank joins
the batch before it; per-worker batches are unchanged; bad arguments are
clear errors. And single-process (no GRADSTREAM_AGENT) shard() yields
global batches of the asked size. Both go through the library (the split
is worker/runtime/data_split.h's, the trainer's too), as do local mode's
optimizer defaults (the job's, common/optim/optimizer_options.h)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

check = cluster.check


def main():
    args = cluster.main_args()
    cluster.require_torch()
    cluster.package_without_cluster(args.build)
    import torch
    import gradstream.torch as gs  # noqa: F401 (the package loads)
    from gradstream.data import _split
    split = _split

    for n, g in ((600, 64), (129, 64), (128, 64), (1000, 30), (7, 4)):
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(n))
        steps = -(-n // g)  # clocks per pass, whatever the world size
        for world in (1, 2, 3, 4):
            if g < world:
                continue
            per_rank = [split(perm, r, world, global_batch_size=g) for r in range(world)]
            for r in range(world):
                check(len(per_rank[r]) == steps, "n %d g %d world %d: rank %d makes %d clocks, "
                      "want %d" % (n, g, world, r, len(per_rank[r]), steps))
            for k in range(steps):
                pieces = [per_rank[r][k] for r in range(world)]
                check(all(len(x) > 0 for x in pieces), "an empty piece")
                got = set(torch.cat(pieces).tolist())
                want = set(perm[k * g:(k + 1) * g].tolist())
                if k < steps - 1 or len(want) >= world:
                    check(got == want and sum(len(x) for x in pieces) == len(want),
                          "n %d g %d world %d clock %d: the pieces are not the global batch" %
                          (n, g, world, k))
                else:  # padded to one index per rank
                    check(want <= got and sum(len(x) for x in pieces) == world, "padding")
    # 129 over 3 ranks in 64s: 64, 64, then 1 index padded to 3.
    p = torch.arange(129)
    check([len(b) for b in split(p, 2, 3, global_batch_size=64)] == [21, 21, 1], "pad")
    # Per-worker batches: rank r takes every world_size-th index.
    p = torch.arange(20)
    check([b.tolist() for b in split(p, 1, 2, batch_size=4)] ==
          [[1, 3, 5, 7], [9, 11, 13, 15], [17, 19]], "per-worker batches")
    try:
        split(torch.arange(12), 0, 4, global_batch_size=3)
        check(False, "a global batch smaller than the world size is refused")
    except ValueError as e:
        print("refused: %s" % e)

    from gradstream.local import local_optimizer
    w = torch.nn.Parameter(torch.zeros(3))
    g = local_optimizer([w]).param_groups[0]
    check(type(local_optimizer([w])).__name__ == "SGD" and abs(g["lr"] - 0.05) < 1e-7 and
          abs(g["momentum"] - 0.9) < 1e-7, "local mode's defaults are the job's: %s" % g)
    g = local_optimizer([w], optimizer="adam").param_groups[0]
    check(abs(g["eps"] - 1e-8) < 1e-12 and abs(g["betas"][1] - 0.999) < 1e-7, "adam: %s" % g)
    g = local_optimizer([w], optimizer="adagrad", lr=0.1).param_groups[0]
    check(abs(g["eps"] - 1e-7) < 1e-12 and abs(g["initial_accumulator_value"] - 0.1) < 1e-7 and
          abs(g["lr"] - 0.1) < 1e-7, "adagrad: %s" % g)
    try:
        local_optimizer([w], optimizer="adamx")
        check(False, "an unknown optimizer is refused")
    except ValueError as e:
        print("refused: %s" % e)

    gs.init()
    x = torch.arange(100).float()
    sizes = [len(b[0]) for b in gs.shard((x,), global_batch_size=32, shuffle=False)]
    check(sizes == [32, 32, 32, 4], "single-process global batches: %s" % sizes)
    try:
        next(gs.shard((x,), batch_size=8, global_batch_size=32))
        check(False, "batch_size and global_batch_size together are refused")
    except ValueError as e:
        print("refused: %s" % e)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
