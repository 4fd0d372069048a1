#!/usr/bin/env python3
"""A step through the gradstream.torch package against the same step
through the C++ PsClient, for a ~25M-parameter model, on a local cluster
(2 shards, 2 workers): two one-worker jobs on the same shards, the package's
(step_bench.py) and the C++ driver's (torch_step_cpp, built by CMake),
stepping in lock-step (a pair is one step of each, in alternating order);
it prints the median of the per-pair speed ratios.

    python3 bench/torch_step/run.py [--build build] [--codec twobit] [--pull_codec none]
                                    [--steps 10] [--malloc worker|default]

NOTE: [torch_step malloc] Both sides' processes start with gs_worker's
malloc settings ([receive memory] in common/rpc/malloc_tuning.h), given
through GLIBC_TUNABLES so that the two get them alike from their first
allocation; with glibc's defaults the C++ driver maps its receive memory
afresh every step and the ratio measures that, not the package. Why and the
figures: README.md here.
"""

import argparse
import os
import sys
import tempfile

# [receive memory]'s values (KeepFreedMemoryForReuse); setting them also
# turns off glibc's dynamic thresholds, as mallopt does.
WORKER_MALLOC = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456"

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "torch"))
import cluster  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--codec", default="twobit")
    ap.add_argument("--pull_codec", default="none")
    ap.add_argument("--malloc", choices=("worker", "default"), default="worker",
                    help="worker: both sides with gs_worker's malloc settings; default: "
                         "glibc's (see [torch_step malloc])")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--width", type=int, default=2500)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()
    pair_dir = tempfile.mkdtemp(prefix="gs-torch-step-")
    for fifo in ("to_cpp", "to_py"):
        os.mkfifo(os.path.join(pair_dir, fifo))
    model = "--width %d --layers %d --pair_dir %s" % (args.width, args.layers, pair_dir)
    if args.malloc == "worker":  # inherited by the cluster and, through gs_worker, both sides
        os.environ["GLIBC_TUNABLES"] = ":".join(
            t for t in (os.environ.get("GLIBC_TUNABLES"), WORKER_MALLOC) if t)
    with cluster.Cluster(args.build, workers=2) as c:
        jobs = [c.submit("--name=torch-step-" + name, "--workers=1", "--codec=" + args.codec,
                         "--pull_codec=" + args.pull_codec,
                         "--entrypoint", cmd + " " + model)
                for name, cmd in (
                    ("package", "%s %s --steps %d" % (sys.executable,
                                                      os.path.join(HERE, "step_bench.py"),
                                                      args.steps)),
                    ("cpp", c.bin("bench/torch_step/torch_step_cpp")))]
        states = [c.wait_job(job, timeout=900) for job in jobs]
        for w in (1, 2):
            log = open(os.path.join(c.run_dir, "worker%d.log" % w)).read().splitlines()
            print("\n".join(l for l in log if l[:1] not in "IWE" or not l[1:5].isdigit()))
        for job, st in zip(jobs, states):
            if st["state"] != "COMPLETED":
                print("job %s: %s %s" % (job, st["state"], st.get("message")))
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
