"""One training step through gradstream, recorded for exactness_test.py:
each rank saves the parameters it pulled before the step (the initial ones),
its batch, and the parameters it pulled after the step, in --out."""

import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradstream.torch as gs


def model_and_batch(rank):
    torch.manual_seed(7)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    g = torch.Generator().manual_seed(100 + rank)
    return model, torch.randn(32, 8, generator=g), torch.randint(0, 3, (32,), generator=g)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    gs.init()
    rank = gs.rank()
    model, x, y = model_and_batch(rank)
    ps = gs.ParameterServer(model)
    before = [p.detach().clone() for p in model.parameters()]
    F.cross_entropy(model(x), y).backward()
    ps.step()
    after = [p.detach().clone() for p in model.parameters()]
    torch.save({"rank": rank, "before": before, "after": after, "x": x, "y": y},
               os.path.join(args.out, "rank%d.pt" % rank))


if __name__ == "__main__":
    main()
