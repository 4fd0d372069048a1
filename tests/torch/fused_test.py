#!/usr/bin/env python3
"""Small tensors travel fused ([fused messages] in worker/client/ps_client.h):
a 2-worker job of 24 small tensors on 2 shards sends, per step and worker,
one Push per shard (the whole step's gradients are one bucket, under the
first bucket's bound) and gets one PullAnswer per shard back, where one
message per tensor went before; and the library's encode thread is never
woken for them, where it was once per tensor: 3,264 elements are under one
batch, so they wait for the step's end, where the training thread encodes
them itself ([encode thread] in worker/client/step_loop.h). Counted by the
library (ps.stats())."""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
check = cluster.check
STEPS = 6


def main():
    args = cluster.main_args()
    cluster.require_torch()
    out = os.path.join(tempfile.mkdtemp(prefix="gs-fused-"), "stats")
    with cluster.Cluster(args.build, workers=2) as c:
        job = c.submit("--name=fused", "--workers=2", "--entrypoint",
                       "%s %s --steps %d --out %s" % (sys.executable,
                                                      os.path.join(HERE, "scripts", "fused.py"),
                                                      STEPS, out))
        st = c.wait_job(job, timeout=180)
        check(st["state"] == "COMPLETED", "the job completed: %s %s" % (st["state"],
                                                                      st.get("message")))
    for rank in (0, 1):
        with open("%s.rank%d.json" % (out, rank)) as f:
            got = json.load(f)
        stats = got["stats"]
        for step in range(STEPS - 1):  # step `step`'s pushes and the pull it asked for
            d = {k: stats[step + 1][k] - stats[step][k] for k in stats[step]}
            print("rank %d step %d: %d chunks in %d Push messages, %d PullAnswers, "
                  "%d encode wake-ups" % (rank, step, d["chunks_pushed"], d["push_messages"],
                                          d["pull_messages"], d["encode_wakeups"]))
            check(d["chunks_pushed"] == got["tensors"], "every tensor pushed once per step")
            check(d["push_messages"] == 2, "one Push per shard per step, got %d" %
                  d["push_messages"])
            check(d["pull_messages"] == 2, "one PullAnswer per shard per step, got %d" %
                  d["pull_messages"])
            check(d["encode_wakeups"] == 0, "no encode wake-up per step, got %d" %
                  d["encode_wakeups"])
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
