"""A small real training for faults_test.py: an MLP on Gaussian clusters
(10 classes in 20 dimensions, seeded, overlapping enough that 400 clocks
single-process reach 0.89, not 1.0: an accuracy bound can fail), a
global batch of 64, --steps clocks slowed by --sleep seconds each so that
a fault lands mid-job. Every member evaluates the final parameters and
reports the accuracy, as the built-in trainer does, so the job's accuracy
survives any one member. --table adds a categorical feature looked up in a
gs.Embedding table on the shards (docs/design/sparse-tables.md): an id
that names the class half of the time."""

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
    # The categorical feature: the class or a random one, times 10 noise ids.
    named = torch.where(torch.rand(n, generator=g) < 0.5, y,
                        torch.randint(0, 10, (n,), generator=g))
    ids = named * 10 + torch.randint(0, 10, (n,), generator=g)
    return centres[y] + torch.randn(n, 20, generator=g), ids, y


class TableModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = gs.Embedding(1000, 8, init_std=0.1)
        self.mlp = nn.Sequential(nn.Linear(28, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x, ids):
        return self.mlp(torch.cat([x, self.table(ids)], dim=1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--table", action="store_true")
    args = ap.parse_args()
    gs.init()
    torch.manual_seed(2)
    if args.table:
        model = TableModel()
        ps = gs.ParameterServer(model, optimizer="adagrad", lr=0.1)
    else:
        mlp = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
        model = lambda x, ids: mlp(x)  # noqa: E731
        ps = gs.ParameterServer(mlp, optimizer="momentum", lr=0.05)
    x, ids, y = data(8192, 3)
    tx, tids, ty = data(2000, 4)
    for xb, ib, yb in gs.shard((x, ids, y), global_batch_size=64, steps=args.steps, seed=5):
        loss = F.cross_entropy(model(xb, ib), yb)
        loss.backward()
        ps.step(loss)
        time.sleep(args.sleep)
    with torch.no_grad():
        acc = (model(tx, tids).argmax(1) == ty).float().mean().item()
    ps.report(acc)
    print("final test accuracy %.4f after %d clocks" % (acc, ps.clock), flush=True)


if __name__ == "__main__":
    main()
