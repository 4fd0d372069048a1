"""A small CNN trained through gradstream with the job's defaults, for
cuda_train_test.py: the model on --device, a fixed synthetic task (10 random
prototype images, each sample one of them plus noise; the same prototypes
on every rank and device),
--steps steps. Each rank writes its losses, encode path, parameter device,
ps.stats() and the final parameters to --out.rank<r>.pt."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradstream.torch as gs


def net():
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(),
                         nn.Linear(128, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    gs.init()
    rank = gs.rank()
    torch.manual_seed(3)
    prototypes = torch.randn(10, 1, 28, 28)
    model = net().to(args.device)
    ps = gs.ParameterServer(model, timeout=120)
    gen = torch.Generator().manual_seed(1000 + rank)
    losses = []
    for _ in range(args.steps):
        y = torch.randint(0, 10, (64,), generator=gen)
        x = prototypes[y] + 2 * torch.randn(64, 1, 28, 28, generator=gen)
        loss = F.cross_entropy(model(x.to(args.device)), y.to(args.device))
        loss.backward()
        ps.step()
        losses.append(loss.item())
    ps.synchronize()
    torch.save({"rank": rank, "losses": losses, "encode_path": ps.encode_path,
                "device": str(next(model.parameters()).device), "stats": ps.stats(),
                "params": [p.detach().cpu() for p in model.parameters()]},
               "%s.rank%d.pt" % (args.out, rank))


if __name__ == "__main__":
    main()
