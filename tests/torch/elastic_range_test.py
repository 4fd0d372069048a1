#!/usr/bin/env python3
"""Elastic jobs (see [elastic jobs] in
server/coordinator/membership_planner.h), the real binaries end to end.

--case random_sync | random_async: a `--workers 1:4` training script on a
pool of one worker; workers then join, are killed (SIGKILL) and leave
(SIGTERM) in an order drawn from a fixed seed, and nobody calls `scale`.
After each event the job fills the pool by itself: its size becomes
min(4, live workers). The job completes with every step, the epochs say why
it grew or shrank, and every clock's pieces make up the script's global batch
whatever the member count (the package's `global_batch_size` contract).

--case below_min (built-in trainer, BOUNDED, no torch needed): a `2:3` job
waits PENDING with 1 worker and starts with 2; a member killed puts it below
MIN, where it runs on and shows "waiting: below min"; a worker that joins
brings it back; below MIN again with nobody joining, it fails after its
min_workers_timeout with a reason that says so."""

import argparse
import os
import random
import signal
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
N = 600
GLOBAL_BATCH = 20  # scripts/elastic.py's
STEPS = 2000  # the seven events took up to ~1,200 clocks on a loaded 2-core machine
SEED = 24
MAX = 4


def members(c, job):
    return c.job(job).get("members", [])


def process_of(c, worker_id):
    """The cluster's name ("worker3") of the process registered as `worker_id`."""
    name = next(w["name"] for w in c.cli_json("cluster")["workers"]
                if w["worker_id"] == worker_id)
    return "worker" + name.rsplit("-", 1)[1]


def clock(c, job):
    return int(c.job(job).get("progress", {}).get("clock", 0))


def trains_on(c, job, what):
    """Waits until the job's clock is 10 past its newest epoch's."""
    def past():
        st = c.job(job)
        epochs = st.get("epochs", [])
        at = int(epochs[-1].get("effective_clock", 0)) if epochs else 0
        return int(st.get("progress", {}).get("clock", 0)) >= at + 10
    c.wait_for(past, 120, what)


def random_case(build, mode):
    cluster.require_torch()
    log = os.path.join(tempfile.mkdtemp(prefix="gs-elastic-range-"), "shares.jsonl")
    os.environ["GRADSTREAM_SHARE_LOG"] = log  # the workers pass it on to the scripts
    # Four joins and three departures, shuffled with a fixed seed; a
    # departure only when the job has a member besides rank 0 to lose.
    rng = random.Random(SEED)
    events = ["join"] * 4 + ["kill", "kill", "leave"]
    rng.shuffle(events)
    with cluster.Cluster(build, workers=1) as c:
        job = c.submit("--name=elastic-range", "--workers=1:%d" % MAX, "--codec=twobit",
                       "--consistency=" + mode, "--staleness=2",
                       "--entrypoint", "%s %s --steps %d --sleep 0.05" % (
                           sys.executable, os.path.join(HERE, "scripts", "elastic.py"), STEPS))
        live = {"worker1"}
        c.wait_for(lambda: len(members(c, job)) == 1, 60, "the job to start with 1 of 1:4")
        trains_on(c, job, "the first member training")
        done = []
        while events:
            event = events.pop(0)
            ms = members(c, job)
            if event != "join" and len(ms) < 2:
                events.insert(min(len(events), 1), event)  # later, after a join
                event = "join"
            if event == "join":
                c.add_worker()
                live.add("worker%d" % c.n_workers)
            else:
                victim = rng.choice(sorted((m for m in ms if int(m.get("rank", 0)) != 0),
                                           key=lambda m: m["worker_id"]))
                name = process_of(c, victim["worker_id"])
                c.kill(name, signal.SIGKILL if event == "kill" else signal.SIGTERM)
                live.discard(name)
                c.wait_for(lambda: all(m["worker_id"] != victim["worker_id"]
                                       for m in members(c, job)), 60,
                           "worker %s out of the job" % victim["worker_id"])
            want = min(MAX, len(live))
            # Leaving members still count until their leave clock.
            c.wait_for(lambda: len([m for m in members(c, job) if not m.get("leaving")]) == want,
                       90, "the job at %d of 1:%d after %s" % (want, MAX, event))
            trains_on(c, job, "the job training after %s" % event)
            st = c.job(job)
            done.append("%s -> %d (%s)" % (event, want, st.get("size_reason", "")))
            print("at clock %d: %s" % (clock(c, job), done[-1]))
            cluster.check(clock(c, job) < STEPS - 100, "the events outlasted the job: raise STEPS")
        print(c.cli("status", job).stdout)
        st = c.wait_job(job, timeout=300)
        ok = st["state"] == "COMPLETED"
        ok = ok and int(st.get("progress", {}).get("clock", 0)) == STEPS
        epochs = st.get("epochs", [])
        sizes = [len(e.get("worker_ids", [])) for e in epochs]
        reasons = [e.get("reason", "") for e in epochs]
        print("state %s at clock %s" % (st["state"], st.get("progress", {}).get("clock")))
        print("membership epochs: %s" % sizes)
        print("reasons: %s" % reasons)
        ok = ok and MAX in sizes and any(r.startswith("grew: ") for r in reasons)
        ok = ok and any("missed heartbeats" in r for r in reasons)
        ok = ok and not any(r.startswith("scale ") for r in reasons)  # nobody scaled by hand
        ok = cluster.check_shares(log, N, GLOBAL_BATCH) and ok
        if not ok:
            c.dump_logs()
    return ok


def below_min_case(build):
    with cluster.Cluster(build, workers=1) as c:
        job = c.submit("--name=below-min", "--workers=2:3", "--min_workers_timeout=25s",
                       "--consistency=bounded", "--staleness=2", "--steps=1000000",
                       "--model=softmax")
        st = c.job(job)
        cluster.check(st["state"] == "PENDING", "PENDING with 1 of min 2: %s" % st)
        c.wait_for(lambda: "1 idle of min 2" in c.job(job).get("message", ""), 30,
                   "the job waiting for MIN")
        c.add_worker()
        c.wait_for(lambda: c.job(job)["state"] == "RUNNING", 60, "the job starting at MIN")
        trains_on(c, job, "2 members training")
        rank1 = next(m for m in members(c, job) if int(m.get("rank", 0)) == 1)
        c.kill(process_of(c, rank1["worker_id"]))
        c.wait_for(lambda: "below min" in c.job(job).get("size_reason", ""), 60,
                   "the job below MIN")
        st = c.job(job)
        print("below min: %s | %s" % (st.get("size_reason"), st.get("message")))
        cluster.check(st["state"] == "RUNNING", "below MIN the job waits, RUNNING")
        before = clock(c, job)
        c.wait_for(lambda: clock(c, job) >= before + 10, 60, "the survivor training on")
        c.add_worker()
        c.wait_for(lambda: c.job(job).get("size_reason", "").startswith("grew: "), 60,
                   "a joiner bringing the job back to MIN")
        cluster.check(c.job(job).get("message", "") == "", "no longer waiting")
        trains_on(c, job, "2 members training again")
        print("resumed: %s" % c.job(job).get("size_reason"))
        ms = members(c, job)
        victim = next(m for m in ms if int(m.get("rank", 0)) != 0)
        c.kill(process_of(c, victim["worker_id"]))
        st = c.wait_job(job, timeout=120)
        print("ended: %s: %s" % (st["state"], st.get("message")))
        ok = st["state"] == "FAILED" and st.get("message", "").startswith(
            "below min workers for 25s: 1 of min 2 active and no idle worker joined")
        print(c.cli("status", job, check=False).stdout)
        if not ok:
            c.dump_logs()
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True, help="the CMake build folder")
    ap.add_argument("--case", required=True, choices=("random_sync", "random_async", "below_min"))
    args = ap.parse_args()
    if args.case == "below_min":
        ok = below_min_case(args.build)
    else:
        ok = random_case(args.build, args.case.split("_", 1)[1])
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
