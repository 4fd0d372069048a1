"""Scripts that use gradstream wrongly, for bad_use_test.py (--case):
  shape: rank 1 declares fc.weight with another shape than rank 0's
  dtype: a float64 model
  clip: clip_grad_norm_ between backward() and ps.step() (changes .grad in
        place while the library encodes it)
  ids_of: a table whose ids_of returns a list, not a tensor of ids
  accuracy: reports an accuracy of 85 (a percentage, not a fraction), goes
            on after the error (the next steps must not send it again) and
            exits 3"""

import argparse
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradstream.torch as gs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True)
    args = ap.parse_args()
    gs.init()
    if args.case == "shape":
        model = nn.Linear(4, 3 if gs.rank() == 0 else 5)
    elif args.case == "dtype":
        model = nn.Linear(4, 3).double()
    elif args.case in ("clip", "accuracy"):
        model = nn.Linear(4, 3)
    elif args.case == "ids_of":
        model = nn.Sequential(gs.Embedding(100, 4, ids_of=lambda batch: batch[0].tolist()),
                              nn.Linear(4, 3))
        ps = gs.ParameterServer(model, timeout=60)
        data = (torch.randint(0, 100, (160,)), torch.randint(0, 3, (160,)))
        for ids, y in gs.shard(data, global_batch_size=8, steps=20):
            F.cross_entropy(model(ids), y).backward()
            ps.step()
        return
    else:
        sys.exit("unknown case")
    ps = gs.ParameterServer(model, timeout=60)
    refused = 0
    for _ in range(1000):
        F.mse_loss(model(torch.randn(8, 4)), torch.zeros(8, model.out_features)).backward()
        if args.case == "clip":
            nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
        ps.step()
        if args.case == "accuracy" and not refused:
            try:
                ps.report(85.0)
            except RuntimeError as e:  # GradstreamError
                print("refused: %s" % e, file=sys.stderr)
                refused = ps.clock
        if args.case == "accuracy" and refused and ps.clock >= refused + 5:
            print("5 more steps after the refusal", file=sys.stderr)
            sys.exit(3)
        time.sleep(0.01)


if __name__ == "__main__":
    main()
