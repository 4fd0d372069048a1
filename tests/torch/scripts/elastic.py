"""A slow little job for elastic_test.py: every share gs.shard hands out is
logged (GRADSTREAM_SHARE_LOG), and each step sleeps so that scaling happens
mid-job."""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradstream.torch as gs

GLOBAL_BATCH = 20  # split across the members: 20, 10 + 10, 7 + 7 + 6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--sleep", type=float, default=0.05)
    args = ap.parse_args()
    gs.init()
    torch.manual_seed(0)
    x = torch.randn(600, 10)
    y = (x[:, 0] > 0).long()
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2))
    ps = gs.ParameterServer(model)
    for xb, yb in gs.shard((x, y), global_batch_size=GLOBAL_BATCH, steps=args.steps):
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        ps.step(loss)
        time.sleep(args.sleep)
    print("done at clock %d as rank %d of %d" % (ps.clock, gs.rank(), gs.world_size()))


if __name__ == "__main__":
    main()
