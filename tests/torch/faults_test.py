"""A script job survives what the failure table (docs/failures.md) says jobs
survive: each --case runs the same small training (scripts/fault_train.py)
as a 2-worker sync job through the package, injects one fault mid-job, and
asserts that the job COMPLETED every step with a final accuracy within 5
points of the same script run single-process:

  shard_no_checkpoint  kill -9 of a shard before its first checkpoint, then a
                       restart: its chunks lost their parameters, pulls answer
                       DATA_LOSS and the workers re-initialize them (the step
                       loop's [step loop], as the built-in trainer);
  shard_old_checkpoint kill -9 of a shard between checkpoints, restart: it
                       restores the older checkpoint, the rounds since are
                       lost (at most the interval) and the job goes on;
  worker_sigkill       kill -9 of a worker: removed after the heartbeat
                       timeout, the spare worker joins in its place;
  worker_sigterm       SIGTERM to a worker: it leaves at a clock boundary,
                       the spare joins;
  coordinator_restart  kill -9 of the coordinator, restart from its state
                       file: the job goes on and completes;
  scale                scale 2 -> 3 -> 1 while it trains.

--table trains a model with a gs.Embedding table on the shards instead
(AdaGrad): rows survive a shard's restart from its checkpoint, a worker's
kill and scaling as parameters do. A shard that restarts without a
checkpoint loses its rows (no worker holds them): the job goes on, with
those rows started again from the initializer, and `gradstream status`
says so on the table's line (docs/design/sparse-tables.md).
"""

import os
import re
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scripts", "fault_train.py")
STEPS = 400
CASES = ("shard_no_checkpoint", "shard_old_checkpoint", "worker_sigkill", "worker_sigterm",
         "coordinator_restart", "scale")


def single_process_accuracy(build, table):
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.abspath(build), "python"))
    env.pop("GRADSTREAM_AGENT", None)
    out = subprocess.run([sys.executable, SCRIPT, "--steps", str(STEPS)] +
                         (["--table"] if table else []), env=env,
                         capture_output=True, text=True, timeout=300, check=True).stdout
    return float(re.search(r"final test accuracy ([0-9.]+)", out).group(1))


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--case", choices=CASES, required=True)
    ap.add_argument("--table", action="store_true")
    args = ap.parse_args()
    cluster.require_torch()
    reference = single_process_accuracy(args.build, args.table)
    case = args.case
    with cluster.Cluster(args.build, workers=3) as c:
        optimizer = ["--optimizer=adagrad", "--lr=0.1"] if args.table else [
            "--optimizer=momentum", "--lr=0.05"]
        flags = ["--workers=2", "--consistency=sync"] + optimizer + [
            "--entrypoint=%s %s --steps %d --sleep 0.03%s" % (
                sys.executable, SCRIPT, STEPS, " --table" if args.table else "")]
        if case == "shard_old_checkpoint":
            flags.append("--checkpoint_every=50")
        job = c.submit(*flags)

        def clock():
            return int(c.job(job).get("progress", {}).get("clock", 0))
        c.wait_for(lambda: clock() >= 80, 120, "clock 80")
        at = clock()
        if case.startswith("shard"):
            if case == "shard_old_checkpoint":
                ckpt = os.path.join(c.run_dir, "ckpt0")
                c.wait_for(lambda: os.path.isdir(ckpt) and os.listdir(ckpt), 60,
                           "shard 0's first checkpoint")
            c.kill("shard0")
            c.restart("shard0")
            if args.table and case == "shard_no_checkpoint":
                def lost_line():
                    out = c.cli("status", job, check=False).stdout
                    return next((l for l in out.splitlines() if l.startswith("tables:") and
                                 "partition(s) were LOST" in l), None)
                c.wait_for(lambda: lost_line() is not None, 60,
                           "the table line to say the partition's rows were lost")
                print(lost_line())
        elif case.startswith("worker"):
            member = next(m for m in c.job(job)["members"] if int(m.get("rank", 0)) == 1)
            name = next(w["name"] for w in c.cli_json("cluster")["workers"]
                        if w["worker_id"] == member["worker_id"])
            c.kill("worker" + name.rsplit("-", 1)[1],
                   signal.SIGKILL if case == "worker_sigkill" else signal.SIGTERM)
        elif case == "coordinator_restart":
            c.kill("coordinator")
            c.restart("coordinator")
        else:
            c.cli("scale", job, "--workers", "3")
            c.wait_for(lambda: clock() >= at + 60, 120, "60 clocks after scaling up")
            c.cli("scale", job, "--workers", "1")
        print("%s at clock %d" % (case, at))
        st = c.wait_job(job, timeout=240)
        p = st.get("progress", {})
        acc, clocks = float(p.get("accuracy", 0.0)), int(p.get("clock", 0))
        epochs = [(len(e.get("worker_ids", [])), e.get("reason", "")) for e in st.get("epochs", [])]
        print("%s: %s, %d clocks, accuracy %.4f (single-process %.4f), epochs %s" %
              (case, st.get("state"), clocks, acc, reference, epochs))
        cluster.check(st.get("state") == "COMPLETED", "job %s: %s" % (st.get("state"),
                                                                       st.get("message", "")))
        cluster.check(clocks == STEPS, "%d clocks, want %d" % (clocks, STEPS))
        cluster.check(acc >= reference - 0.05, "accuracy %.4f, single-process %.4f" %
                      (acc, reference))
        if case.startswith("worker") or case == "scale":
            cluster.check(len(epochs) >= 2, "the membership changed: %s" % epochs)
        if case == "worker_sigterm":
            # [script stop]: the script finished its clock and sent Leave; it
            # was not dropped after missed heartbeats.
            cluster.check(any(r.endswith(" left") for _, r in epochs),
                          "SIGTERM: a 'left' epoch, got %s" % epochs)
    print("PASS")


if __name__ == "__main__":
    main()
