#!/usr/bin/env python3
"""A Fashion-MNIST CNN trained through gradstream.

Runs unchanged as a plain single-process script:
    python3 examples/fashion_mnist/train.py --epochs 3
and as a job on every worker of a gradstream cluster:
    gradstream submit --entrypoint "python3 examples/fashion_mnist/train.py --epochs 3" \
        --workdir . --workers 2 --optimizer momentum --lr 0.02 --codec twobit

--batch_size is the global batch, split across the job's workers, so both
take the same optimizer steps on the same samples (see main()).
tests/torch/fashion_mnist_job_test.py compares the three (single-process,
codec none, twobit) with the same script.

Reads the four gzip'd IDX files (Debian's dataset-fashion-mnist package puts
them in /usr/share/datasets/fashion-mnist); nothing is downloaded.
"""

import argparse
import gzip
import math
import os
import struct
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradstream.torch as gs


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    t = torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8)
    return t.reshape(dims)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    def find(kind):
        for name in ("%s-%s-idx%d-ubyte.gz" % (prefix, kind, 3 if kind == "images" else 1),
                     "%s-%s-idx%d-ubyte" % (prefix, kind, 3 if kind == "images" else 1)):
            if os.path.exists(os.path.join(data_dir, name)):
                return os.path.join(data_dir, name)
        raise FileNotFoundError("no %s %s file in %s" % (prefix, kind, data_dir))
    x = read_idx(find("images")).float().div_(255.0).sub_(0.2860).div_(0.3530).unsqueeze(1)
    y = read_idx(find("labels")).long()
    return x, y


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5)
        self.conv2 = nn.Conv2d(16, 32, 5)
        self.fc1 = nn.Linear(32 * 4 * 4, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    correct = sum((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum().item()
                  for i in range(0, len(x), 1000))
    model.train()
    return correct / len(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=float, default=1.0,
                    help="passes over the training set by the whole job")
    ap.add_argument("--batch_size", type=int, default=64,
                    help="the global batch: split across the job's current workers")
    ap.add_argument("--lr", type=float, default=0.02,
                    help="single-process; a job's is --lr of submit")
    ap.add_argument("--train_limit", type=int, default=0, help="use the first N training images")
    ap.add_argument("--test_limit", type=int, default=0, help="evaluate on the first N test images")
    ap.add_argument("--eval_every", type=int, default=200, help="clocks between evaluations")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    gs.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    x, y = load(args.data, "train")
    if args.train_limit:
        x, y = x[:args.train_limit], y[:args.train_limit]
    tx, ty = load(args.data, "test")
    if args.test_limit:
        tx, ty = tx[:args.test_limit], ty[:args.test_limit]
    model = Net()
    ps = gs.ParameterServer(model, optimizer="momentum", lr=args.lr, momentum=0.9)
    m = gs.membership()
    # The batch is global: each clock consumes --batch_size samples, split
    # across however many workers the job has at that clock (gs.shard's
    # global_batch_size). So a job takes the same optimizer steps on the same
    # samples as this script single-process, --lr means the same whatever
    # the world size, and scaling mid-job changes neither. (Horovod and DDP
    # take a per-worker batch and ask you to scale the learning rate with the
    # world size; here the learning rate lives on the shards and the world
    # size may change mid-job, so the batch is what stays fixed.)
    steps = math.ceil(args.epochs * len(x) / args.batch_size)
    print("rank %d of %d: %d training images, %d clocks of %d (global)" %
          (m.rank, m.world_size, len(x), steps, args.batch_size), flush=True)
    start = time.time()
    for xb, yb in gs.shard((x, y), global_batch_size=args.batch_size, steps=steps,
                           seed=args.seed):
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        ps.step(loss)
        if gs.rank() == 0 and ps.clock % args.eval_every == 0 and ps.clock < steps:
            acc = evaluate(model, tx, ty)
            ps.report(acc)
            print("clock %d: loss %.4f, test accuracy %.4f" % (ps.clock, loss.item(), acc),
                  flush=True)
    if gs.rank() == 0:
        acc = evaluate(model, tx, ty)
        ps.report(acc)
        st = ps.stats()
        print("final test accuracy %.4f after %d clocks (%.1fs); pushed %d bytes (fp32 %d)" %
              (acc, ps.clock, time.time() - start, st["bytes_pushed"], st["fp32_bytes_pushed"]),
              flush=True)


if __name__ == "__main__":
    main()
