#!/usr/bin/env python3
"""The layer-wise wait covers what a forward reads, not what a module owns:
a sync job (codec none) whose pull arrives slowly (each shard's connection
limited to 200 kB/s), where right after each ps.step() one forward runs
while the pull is in flight -- nn.MultiheadAttention (reads out_proj
itself), nn.TransformerEncoderLayer in training and in eval under no_grad
(the fast path reads the whole block), an LSTM, tied weights, a parent that
reads its child's weight -- and must equal to the bit the same forward run
after ps.synchronize()."""

import collections
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CLOCKS = 25


def main():
    args = cluster.main_args()
    cluster.require_torch()
    out = tempfile.mkdtemp(prefix="gs-reads-")
    with cluster.Cluster(args.build, workers=2, shards=1, shard_rate=200_000) as c:
        job = c.submit("--name=forward-reads", "--workers=2", "--codec=none",
                       "--consistency=sync", "--optimizer=momentum", "--lr=0.05",
                       "--entrypoint", "%s %s --out %s --clocks %d" % (
                           sys.executable, os.path.join(HERE, "scripts", "forward_reads.py"),
                           out, CLOCKS))
        st = c.wait_job(job, timeout=240)
        cluster.check(st["state"] == "COMPLETED",
                      "job %s: %s %s" % (job, st["state"], st.get("message")))
    failures = []
    for rank in (0, 1):
        records = [json.loads(line) for line in open(os.path.join(out, "rank%d.jsonl" % rank))]
        cluster.check(len(records) == CLOCKS - 1, "rank %d wrote %d checks, want %d" %
                      (rank, len(records), CLOCKS - 1))
        seen = collections.Counter()
        for r in records:
            seen[(r["case"], r["mode"])] += 1
            status = "equal" if r["equal"] else "DIFFERS by %.3g" % r["max_diff"]
            print("rank %d clock %2d %-18s %-5s %s%s" % (
                rank, r["clock"], r["case"], r["mode"], status,
                " (fast path)" if r["fast_path"] else ""))
            if not r["equal"]:
                failures.append("rank %d clock %d: %s (%s) read parameters the pull had not "
                                "written yet" % (rank, r["clock"], r["case"], r["mode"]))
        # Every case in both modes at least twice: the first forward in a
        # mode runs on a settled pull (its reads are recorded), the next not.
        for case in ("parent_reads_child", "mha", "encoder", "lstm", "tied"):
            for mode in ("train", "eval"):
                cluster.check(seen[(case, mode)] >= 2, "rank %d checked %s/%s %d times" %
                              (rank, case, mode, seen[(case, mode)]))
        cluster.check(any(r["fast_path"] for r in records if r["case"] == "encoder" and
                          r["mode"] == "eval"),
                      "the encoder layer's eval forward never took the fast path")
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("PASS: every forward read the parameters of the version its step must see")


if __name__ == "__main__":
    main()
