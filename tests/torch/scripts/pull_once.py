"""A few steps of one wide Linear layer, for pull_once_test.py: rank
--straggle_rank sleeps --straggle_s seconds before its first backward, and
every rank waits for its last pull before it exits (ps.synchronize()), so
each pull the job asks for is answered in full."""

import argparse
import json
import time

import torch
import torch.nn as nn

import gradstream.torch as gs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--dim_in", type=int, default=1280)
    ap.add_argument("--dim_out", type=int, default=1250)
    ap.add_argument("--straggle_rank", type=int, default=-1)
    ap.add_argument("--straggle_s", type=float, default=0.0)
    args = ap.parse_args()
    gs.init()
    torch.manual_seed(3)
    model = nn.Linear(args.dim_in, args.dim_out)
    ps = gs.ParameterServer(model)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(64, args.dim_in, generator=g)
    y = torch.randn(64, args.dim_out, generator=g)
    for xb, yb in gs.shard((x, y), global_batch_size=16, steps=args.steps):
        loss = ((model(xb) - yb) ** 2).mean()
        if ps.clock == 0 and gs.rank() == args.straggle_rank:
            time.sleep(args.straggle_s)
        loss.backward()
        ps.step(loss)
    ps.synchronize()
    print(json.dumps(dict(ps.stats(), rank=gs.rank(), clock=ps.clock)), flush=True)


if __name__ == "__main__":
    main()
