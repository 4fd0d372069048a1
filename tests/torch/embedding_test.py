#!/usr/bin/env python3
"""gs.Embedding: a table that lives on the shards (docs/design/sparse-tables.md).
A sync job of 2 workers trains a table + Linear model for 3 steps with codec
none (lookups, and bags with mode sum); every row and parameter equals, within
1e-5 relative, a torch reference that averages the two workers' gradients with
nn.Embedding(sparse=True) / nn.EmbeddingBag(sparse=True) and applies the same
optimizer (SGD; AdaGrad, whose per-row accumulators make a lazy and an eager
update differ); rows no batch touched keep their first-touch values; both
ranks read the same first-touch rows; a bad id raises IndexError naming it;
a forward of more rows than the worker's row budget raises MemoryError with
the figures before it asks for any, and the next forward reads its rows;
`gradstream status` shows the table's rows. Fed by gs.shard (5 steps, an
evaluation-like read of other rows before each training forward), the
training forwards use the rows ps.step() prefetched in the requests of the
next clock's pull -- reading the batch's ids or a copy of them, 3 -- except
one that reads other ids (its prefetch is dropped unread) and, on rank 0,
one whose pull was asked again before the round closed (its prefetch given
up with that pull: it pulls its own), and the rows still equal the
reference ([row prefetch] in
python/gradstream/parameter_server.py); the same when the model hashes the
batch's ids and the table's ids_of computes them for the prefetch."""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def reference(runs, optimizer, lr, mode):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
    import gradstream.torch as gs
    rows = runs[0]["rows_before"]
    emb = (nn.Embedding(1000, 4, sparse=True) if mode is None else
           nn.EmbeddingBag(1000, 4, mode=mode, sparse=True))
    out = nn.Linear(4, 3)
    with torch.no_grad():
        emb.weight.zero_()
        emb.weight[:len(rows)] = rows
        for p, v in zip(out.parameters(), runs[0]["dense_before"]):
            p.copy_(v)
    params = [emb.weight] + list(out.parameters())
    opt = gs.local_optimizer(params, optimizer=optimizer, lr=lr)
    for step in range(len(runs[0]["batches"])):
        grads = []
        for r in runs:
            ids, offsets, y = r["batches"][step]
            for p in params:
                p.grad = None
            e = emb(ids) if mode is None else emb(ids, offsets)
            F.cross_entropy(out(e), y).backward()
            grads.append([p.grad for p in params])
        for i, p in enumerate(params):
            p.grad = (grads[0][i] + grads[1][i]) / 2
            if p.grad.is_sparse:
                p.grad = p.grad.coalesce()
        opt.step()
    return emb.weight.detach()[:len(rows)], [p.detach() for p in out.parameters()]


def worst_relative(got, want):
    import torch
    diff = (got - want).abs()
    return (diff / torch.clamp(want.abs(), min=1e-2)).max().item()


def main():
    args = cluster.main_args()
    cluster.require_torch()
    import torch
    failures = []
    with cluster.Cluster(args.build, workers=2) as c:
        for optimizer, lr, mode, feed in (("sgd", 0.5, None, "list"),
                                          ("adagrad", 0.3, None, "list"),
                                          ("adagrad", 0.3, "sum", "list"),
                                          ("adagrad", 0.3, None, "shard"),
                                          ("sgd", 0.5, None, "shard-hashed")):
            out = tempfile.mkdtemp(prefix="gs-table-")
            name = "%s-%s-%s" % (optimizer, mode or "lookup", feed)
            job = c.submit("--name=table-" + name, "--workers=2", "--codec=none",
                           "--consistency=sync", "--optimizer=" + optimizer, "--lr=%g" % lr,
                           "--entrypoint", "%s %s --out %s --mode '%s' --feed %s" % (
                               sys.executable, os.path.join(HERE, "scripts", "table_steps.py"),
                               out, mode or "", feed))
            st = c.wait_job(job, timeout=120)
            if st["state"] != "COMPLETED":
                raise AssertionError("job %s: %s %s" % (job, st["state"], st.get("message")))
            runs = [torch.load(os.path.join(out, "rank%d.pt" % r)) for r in (0, 1)]
            status = c.cli("status", job).stdout
            table_line = next((l for l in status.splitlines() if l.startswith("tables:")), "")
            print(table_line)
            # --codec=none: the rows travel fp32 ([fp16 rows] in common/job/shard_map.cc).
            if ("emb.table 1000 x 4 (rows fp32): " not in table_line
                    or " rows held (" not in table_line):
                failures.append("%s: `gradstream status` shows no table line:\n%s" % (name, status))
            if not torch.equal(runs[0]["rows_before"], runs[1]["rows_before"]):
                failures.append("%s: the ranks read different first-touch rows" % name)
            std = runs[0]["rows_before"].std().item()
            if not 0.3 < std < 0.7:
                failures.append("%s: first-touch rows have std %.3f, init_std 0.5" % (name, std))
            rows, dense = reference(runs, optimizer, lr, mode)
            worst = max(worst_relative(r["rows_after"], rows) for r in runs)
            for r in runs:
                for got, want in zip(r["dense_after"], dense):
                    worst = max(worst, worst_relative(got, want))
            touched = set()
            for r in runs:
                for ids, _, _ in r["batches"]:
                    touched.update(ids.tolist())
            untouched = [i for i in range(len(rows)) if i not in touched]
            moved = (runs[0]["rows_after"] - runs[0]["rows_before"]).abs().max(dim=1).values
            still = max(moved[i].item() for i in untouched) if untouched else 0.0
            print("%-20s: max relative difference to the torch reference %.2e; %d touched rows "
                  "moved by up to %.3g, %d untouched by %.3g; pushed %d bytes" % (
                      name, worst, len(touched), moved.max().item(), len(untouched), still,
                      runs[0]["stats"]["bytes_pushed"]))
            if not (worst <= 1e-5 and moved.max().item() > 0 and untouched and still == 0.0):
                failures.append("%s: rows or parameters differ from the reference (%.2e) or "
                                "untouched rows moved (%.3g)" % (name, worst, still))
            for r in runs:
                used, unused = r["stats"]["row_prefetch_used"], r["stats"]["row_prefetch_unused"]
                # shard-hashed: ids the model computes, prefetched through ids_of
                want = ((2, 2) if r["rank"] == 0 else (3, 1)) if feed != "list" else (0, 0)
                if r["stats"]["row_prefetch_fused"] != sum(want):  # none asked on its own
                    failures.append("%s: rank %d asked %d of %d row prefetches in the clock's pull"
                                    % (name, r["rank"], r["stats"]["row_prefetch_fused"],
                                       sum(want)))
                print("%-20s: rank %d used %d row prefetches, dropped %d unread (want %d, %d)" % (
                    name, r["rank"], used, unused, *want))
                if (used, unused) != want:
                    failures.append("%s: rank %d used %d row prefetches and dropped %d, want %d "
                                    "and %d" % (name, r["rank"], used, unused, *want))
                if "id 1000 is out of range: the table has 1000 rows" not in r["bad_id"]:
                    failures.append("%s: a bad id raised %r" % (name, r["bad_id"]))
                want_msg = ("a forward of table 'emb.table' reads 1000 unique rows, 31.2 KiB with "
                            "their gradients, on top of 0 B this clock's forwards hold: past the "
                            "worker's row budget of 16.0 KiB (row_budget=)")
                if want_msg not in r["too_many"] or r["asked_past_budget"] != 0:
                    failures.append("%s: a forward past the row budget raised %r after asking %d "
                                    "pulls" % (name, r["too_many"], r["asked_past_budget"]))
                if not torch.equal(r["after_refusal"], r["rows_after"]):
                    failures.append("%s: the rows read after a refused forward differ" % name)
    if failures:
        print("FAIL: %s" % "; ".join(failures))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
