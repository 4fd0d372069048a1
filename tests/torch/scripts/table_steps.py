"""A few sync steps of a model with a gs.Embedding table, recorded for
embedding_test.py: each rank saves the table's rows 0..ROWS-1 before
training (the first touch, read without a gradient), its batches, the
dense parameters before and after, the rows after, what a bad id
raises, and what a forward past the row budget (ROW_BUDGET) raises, and
that a forward within it still reads its rows after that. With --feed
shard the batches come from gs.shard (the ids a tensor of its batch, so
ps.step() prefetches the next batch's rows); before every
training forward but the first an evaluation-like read of other rows runs
without a gradient, step 2's forward reads a copy of the batch's ids,
step 3's other ids (so its prefetch goes unread), and rank 0 asks for
step 4's pull again before the round closes (so the prefetch that rode in
the first one is given up with it and the forward pulls its rows itself).
--feed shard-hashed is the same with ids the model computes from the
batch's (hashed), which the table's ids_of computes for the prefetch."""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradstream.torch as gs

ROWS = 40  # the ids the batches draw from (of a table of 1000)
STEPS = 3
SHARD_STEPS = 5  # one pass of 80 samples
# Bytes of rows and gradients a clock's forwards may hold: the batches' (at
# most 8 rows, 256 B) and reads of ROWS rows fit; all 1000 rows (32000 B
# with gradients) do not.
ROW_BUDGET = 16 << 10


def hashed(ids):
    """The ids a --feed shard-hashed model reads: still under ROWS - 10."""
    return (ids * 7 + 3) % (ROWS - 10)


class Model(nn.Module):
    def __init__(self, mode, hash_ids=False):
        super().__init__()
        self.hash_ids = hash_ids
        self.emb = gs.Embedding(1000, 4, mode=mode, init_std=0.5,
                                ids_of=(lambda batch: hashed(batch[0])) if hash_ids else None)
        self.out = nn.Linear(4, 3)

    def forward(self, ids, offsets=None):
        if self.hash_ids:
            ids = hashed(ids)
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
    ap.add_argument("--feed", default="list", choices=("list", "shard", "shard-hashed"),
                    help="list: batch() per step; shard: gs.shard over SHARD_STEPS batches; "
                         "shard-hashed: the same, the model hashing the ids")
    args = ap.parse_args()
    mode = args.mode or None
    gs.init()
    rank = gs.rank()
    torch.manual_seed(7)
    model = Model(mode, hash_ids=args.feed == "shard-hashed")
    ps = gs.ParameterServer(model, row_budget=ROW_BUDGET)
    everything = torch.arange(ROWS)
    with torch.no_grad():
        rows_before = model.emb(everything).clone() if mode is None else None
        if mode is not None:  # a bag of one row each reads the row itself
            rows_before = model.emb(everything, torch.arange(ROWS)).clone()
    dense_before = [p.detach().clone() for p in model.out.parameters()]
    batches = []
    if args.feed != "list":  # lookups only: 8 ids and 8 labels per rank and clock
        g = torch.Generator().manual_seed(11)  # ids under ROWS - 10: some rows untouched
        data = (torch.randint(0, ROWS - 10, (16 * SHARD_STEPS,), generator=g),
                torch.randint(0, 3, (16 * SHARD_STEPS,), generator=g))
        for step, (ids, y) in enumerate(gs.shard(data, global_batch_size=16, steps=SHARD_STEPS)):
            if step > 0:
                with torch.no_grad():
                    model.emb(torch.arange(ROWS - 1, -1, -1))
            if step == 2:
                ids = ids.clone()
            elif step == 3:
                ids = (ids + 1) % (ROWS - 10)
            batches.append((hashed(ids) if model.hash_ids else ids, None, y))  # what emb read
            F.cross_entropy(model(ids), y).backward()
            if step == 3 and rank == 1:
                time.sleep(2)  # rank 0's next pull stays parked while it is asked again
            ps.step()
            if step == 3 and rank == 0:  # asked again, as after a membership change
                s = ps._session
                s.lib.gs_abandon_pull(s.handle)
                s.lib.gs_pull_start(s.handle, s.clock, ps._targets())
    for step in range(STEPS if args.feed == "list" else 0):
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
    pulls = ps.stats()["pull_messages"]
    try:
        model.emb(torch.arange(1000))  # with gradients: 32000 B
        too_many = "no error"
    except MemoryError as e:
        too_many = str(e)
    asked_past_budget = ps.stats()["pull_messages"] - pulls
    with torch.no_grad():
        after_refusal = (model.emb(everything) if mode is None else
                         model.emb(everything, torch.arange(ROWS))).clone()
    torch.save({"rank": rank, "rows_before": rows_before, "rows_after": rows_after,
                "dense_before": dense_before, "dense_after": dense_after, "batches": batches,
                "bad_id": bad, "too_many": too_many, "asked_past_budget": asked_past_budget,
                "after_refusal": after_refusal, "stats": ps.stats()},
               "%s/rank%d.pt" % (args.out, rank))


if __name__ == "__main__":
    main()
