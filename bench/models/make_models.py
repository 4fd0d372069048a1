#!/usr/bin/python3
"""Saves the built-in models as TorchScript modules for model_runtime_bench.

Reads the layer lists that `model_runtime_bench --print_networks` prints
(from the very NetworkSpec the built-in model executes) on stdin and writes
OUT/<case>.pt per case: torch.jit.script of a module whose forward(x, y)
returns (mean softmax cross-entropy, number of rows whose argmax is the
label), as Model::ForwardBackward's StepStats; its network is the attribute
`net`, an nn.Sequential whose layers carry the built-in's tensor names
("net.conv1.weight" is the built-in's "conv1.weight"). Dense layers read
their input flattened, as the built-in's do.

    build/bench/models/model_runtime_bench --print_networks |
        /usr/bin/python3 bench/models/make_models.py --out DIR
"""
import argparse
import collections
import os
import sys
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import nn


class Step(nn.Module):
    def __init__(self, net: nn.Sequential):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        logits = self.net(x)
        loss = F.cross_entropy(logits, y)
        correct = (logits.argmax(1) == y).sum()
        return loss, correct


def build(layers):
    """nn.Sequential from (kind, args) pairs; parameterless layers get
    numbered names that cannot clash with the built-in's."""
    mods = collections.OrderedDict()
    flat = False
    for kind, args in layers:
        if kind == "dense":
            name, n_in, n_out = args[0], int(args[1]), int(args[2])
            if not flat:
                mods[f"flatten{len(mods)}"] = nn.Flatten()
                flat = True
            mods[name] = nn.Linear(n_in, n_out)
        elif kind == "conv":
            name, c_in, c_out, k, pad = args[0], *map(int, args[1:5])
            mods[name] = nn.Conv2d(c_in, c_out, k, padding=pad)
        elif kind == "relu":
            mods[f"relu{len(mods)}"] = nn.ReLU()
        elif kind == "maxpool":
            mods[f"pool{len(mods)}"] = nn.MaxPool2d(2)  # floors odd sizes
        else:
            raise ValueError(f"unknown layer kind {kind!r}")
    return nn.Sequential(mods)


def parse(lines):
    """Yields (case name, layers) from --print_networks output."""
    name, layers = None, []
    for lineno, line in enumerate(lines, 1):
        words = line.split()
        if not words:
            continue
        if words[0] == "case":
            name, layers = words[1], []
        elif words[0] == "end":
            if name is None:
                raise ValueError(f"line {lineno}: 'end' without 'case'")
            yield name, layers
            name = None
        elif name is None:
            raise ValueError(f"line {lineno}: layer outside a case: {line.strip()!r}")
        else:
            layers.append((words[0], words[1:]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for <case>.pt")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    n = 0
    for name, layers in parse(sys.stdin):
        path = os.path.join(args.out, f"{name}.pt")
        torch.jit.script(Step(build(layers))).save(path)
        print(f"wrote {path}", file=sys.stderr)
        n += 1
    if n == 0:
        sys.exit("make_models.py: no cases on stdin (pipe model_runtime_bench --print_networks)")


if __name__ == "__main__":
    main()
