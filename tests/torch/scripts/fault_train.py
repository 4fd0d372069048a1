"""A small real training for faults_test.py: an MLP on Gaussian clusters
(10 classes in 20 dimensions, seeded, overlapping enough that 400 clocks
single-process reach 0.89, not 1.0: an accuracy bound can fail), a
global batch of 64, --steps clocks slowed by --sleep seconds each so that
a fault lands mid-job. Every member evaluates the final parameters and
reports the accuracy, as the built-in trainer does, so the job's accuracy
survives any one member."""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradstream.torch as gs


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(10, 20, generator=torch.Generator().manual_seed(1)) * 0.7
    y = torch.randint(0, 10, (n,), generator=g)
    return centres[y] + torch.randn(n, 20, generator=g), y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--sleep", type=float, default=0.0)
    args = ap.parse_args()
    gs.init()
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
    ps = gs.ParameterServer(model, optimizer="momentum", lr=0.05)
    x, y = data(8192, 3)
    tx, ty = data(2000, 4)
    for xb, yb in gs.shard((x, y), global_batch_size=64, steps=args.steps, seed=5):
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        ps.step(loss)
        time.sleep(args.sleep)
    with torch.no_grad():
        acc = (model(tx).argmax(1) == ty).float().mean().item()
    ps.report(acc)
    print("final test accuracy %.4f after %d clocks" % (acc, ps.clock), flush=True)


if __name__ == "__main__":
    main()
