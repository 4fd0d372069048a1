#!/usr/bin/env python3
"""A step through the gradstream.torch package against the same step
through the C++ PsClient (libgradstream_c called directly), for a
~25M-parameter model, on a local cluster (2 shards, 1 worker):

    python3 bench/torch_step/run.py [--build build] [--codec twobit] [--steps 10]
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "torch"))
import cluster  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--codec", default="twobit")
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    with cluster.Cluster(args.build, workers=1) as c:
        job = c.submit("--name=torch-step-bench", "--workers=1", "--codec=" + args.codec,
                       "--entrypoint", "%s %s --steps %d" % (
                           sys.executable, os.path.join(HERE, "step_bench.py"), args.steps))
        st = c.wait_job(job, timeout=900)
        log = open(os.path.join(c.run_dir, "worker1.log")).read().splitlines()
        print("\n".join(l for l in log if not l[:1] in "IWE" or not l[1:5].isdigit()))
        if st["state"] != "COMPLETED":
            print("job %s: %s" % (st["state"], st.get("message")))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
