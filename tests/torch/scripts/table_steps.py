"""A few sync steps of a model with a gs.Embedding table, recorded for
embedding_test.py: each rank saves the table's rows 0..ROWS-1 before
training (the first touch, read without a gradient), its batches, the
dense parameters before and after, the rows after, and what a bad id
raises."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradstream.torch as gs

ROWS = 40  # the ids the batches draw from (of a table of 1000)
STEPS = 3


class Model(nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.emb = gs.Embedding(1000, 4, mode=mode, init_std=0.5)
        self.out = nn.Linear(4, 3)

    def forward(self, ids, offsets=None):
        return self.out(self.emb(ids) if offsets is None else self.emb(ids, offsets))


def batch(rank, step, mode):
    g = torch.Generator().manual_seed(1000 * rank + step)
    ids = torch.randint(0, ROWS // 2 + 10 * rank, (8,), generator=g)  # repeats, some rows untouched
    y = torch.randint(0, 3, (4 if mode else 8,), generator=g)
    offsets = torch.tensor([0, 2, 4, 6]) if mode else None
    return ids, offsets, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", default="", help="'' (lookup) or sum/mean (bags)")
    args = ap.parse_args()
    mode = args.mode or None
    gs.init()
    rank = gs.rank()
    torch.manual_seed(7)
    model = Model(mode)
    ps = gs.ParameterServer(model)
    everything = torch.arange(ROWS)
    with torch.no_grad():
        rows_before = model.emb(everything).clone() if mode is None else None
        if mode is not None:  # a bag of one row each reads the row itself
            rows_before = model.emb(everything, torch.arange(ROWS)).clone()
    dense_before = [p.detach().clone() for p in model.out.parameters()]
    batches = []
    for step in range(STEPS):
        ids, offsets, y = batch(rank, step, mode)
        batches.append((ids, offsets, y))
        F.cross_entropy(model(ids, offsets), y).backward()
        ps.step()
    with torch.no_grad():
        rows_after = (model.emb(everything) if mode is None else
                      model.emb(everything, torch.arange(ROWS))).clone()
    ps.synchronize()
    dense_after = [p.detach().clone() for p in model.out.parameters()]
    try:
        model.emb(torch.tensor([1000]))
        bad = "no error"
    except IndexError as e:
        bad = str(e)
    torch.save({"rank": rank, "rows_before": rows_before, "rows_after": rows_after,
                "dense_before": dense_before, "dense_after": dense_after, "batches": batches,
                "bad_id": bad, "stats": ps.stats()}, "%s/rank%d.pt" % (args.out, rank))


if __name__ == "__main__":
    main()
