#!/usr/bin/env python3
"""Scaling an entry-point job 2 -> 3 -> 1 workers while it runs, with a
worker killed (SIGKILL, mid-step) in between: the job completes; a spare
worker replaces the dead one; in every membership epoch the workers' data
shares (what gs.shard handed each rank, logged by the script) are disjoint
and cover the dataset, and every clock's pieces make up the script's global
batch whatever the world size; the scaled-down workers leave cleanly."""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
N = 600
GLOBAL_BATCH = 20  # scripts/elastic.py's


def main():
    args = cluster.main_args()
    cluster.require_torch()
    log = os.path.join(tempfile.mkdtemp(prefix="gs-elastic-"), "shares.jsonl")
    os.environ["GRADSTREAM_SHARE_LOG"] = log  # the workers pass it on to the scripts
    with cluster.Cluster(args.build, workers=4) as c:
        job = c.submit("--name=elastic", "--workers=2", "--codec=twobit", "--consistency=sync",
                       "--entrypoint", "%s %s --steps 320 --sleep 0.05" % (
                           sys.executable, os.path.join(HERE, "scripts", "elastic.py")))
        clock = lambda: int(c.job(job).get("progress", {}).get("clock", 0))  # noqa: E731
        c.wait_for(lambda: clock() >= 30, 90, "clock 30")
        c.cli("scale", job, "--workers", "3")
        c.wait_for(lambda: len(c.job(job).get("epochs", [])) >= 2 and
                   clock() >= int(c.job(job)["epochs"][-1].get("effective_clock", 0)) + 20,
                   90, "3 workers training")
        # Kill a rank-1 worker's process (its script dies with it): removed
        # at its clock after the heartbeat timeout, the spare replaces it.
        victim = next(m for m in c.job(job)["members"] if int(m.get("rank", 0)) == 1)
        name = next(w["name"] for w in c.cli_json("cluster")["workers"]
                    if w["worker_id"] == victim["worker_id"])
        proc = dict(c.procs)["worker" + name.rsplit("-", 1)[1]]
        proc.kill()
        print("killed %s (worker %s) at clock %d" % (name, victim["worker_id"], clock()))
        c.wait_for(lambda: any("missed heartbeats" in e.get("reason", "")
                               for e in c.job(job).get("epochs", [])) and
                   len(c.job(job)["epochs"][-1].get("worker_ids", [])) == 3,
                   60, "the dead worker replaced")
        c.cli("scale", job, "--workers", "1")
        st = c.wait_job(job, timeout=150)
        print(c.cli("status", job).stdout)
        ok = st["state"] == "COMPLETED"
        epochs = st.get("epochs", [])
        sizes = [len(e.get("worker_ids", [])) for e in epochs]
        print("membership epochs: %s" % sizes)
        reasons = [e.get("reason", "") for e in epochs]
        print("reasons: %s" % reasons)
        ok = ok and 3 in sizes and sizes[-1] == 1 and any("missed heartbeats" in r
                                                          for r in reasons)
        ok = cluster.check_shares(log, N, GLOBAL_BATCH) and ok
        if not ok:
            c.dump_logs()
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
