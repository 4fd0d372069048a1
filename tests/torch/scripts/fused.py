"""A model of many small tensors, for fused_test.py: 12 Linear(16, 16)
layers (24 tensors, 3,264 parameters), --steps steps; each rank writes its
ps.stats() after every forward (which has waited for the whole pull, so
each snapshot holds the pushes of the steps before and the answers of the
pulls they asked for) to --out.rank<r>.json."""

import argparse
import json

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradstream.torch as gs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    gs.init()
    torch.manual_seed(1)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(12)])
    ps = gs.ParameterServer(model, timeout=60)
    stats = []
    gen = torch.Generator().manual_seed(gs.rank())
    for _ in range(args.steps):
        x = torch.randn(8, 16, generator=gen)
        loss = F.mse_loss(model(x), x)
        stats.append(ps.stats())
        loss.backward()
        ps.step()
    with open("%s.rank%d.json" % (args.out, gs.rank()), "w") as f:
        json.dump({"tensors": len(list(model.parameters())), "stats": stats}, f)


if __name__ == "__main__":
    main()
