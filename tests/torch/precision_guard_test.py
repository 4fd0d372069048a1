#!/usr/bin/env python3
"""The precision guard at work (common/job/precision.h): a job whose push
codec is forced to something that breaks training -- twobit with a fixed
threshold of 100, far above any gradient of the Fashion-MNIST example, so
nothing is ever sent and the error-feedback residual only grows -- is held
to the error bound by exact sends and ends within 2 points of the same
script single-process; the same job with the guard off
(--precision_bound=-1, measure only) stays near chance. The two jobs run
side by side on a 4-worker cluster beside the single-process run (2 epochs
of the first 16000 images: 500 clocks of 64). Also checks that status
reports the push error, the exact sends and the tensors raised to fp16,
and the shards' metric."""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = "/usr/share/datasets/fashion-mnist"
BREAKER = ("--codec=twobit", "--twobit_threshold=100", "--twobit_min_elems=1",
           "--min_compress_elems=1")


def main():
    args = cluster.main_args()
    cluster.require_torch()
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print("SKIP: no Fashion-MNIST in %s (apt-get install dataset-fashion-mnist)" % DATA)
        return cluster.SKIP
    script = ("%s examples/fashion_mnist/train.py --epochs 2 --train_limit 16000 "
              "--test_limit 2000 --eval_every 1000000 --lr 0.02" % sys.executable)
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.abspath(args.build), "python"))
    env.pop("GRADSTREAM_AGENT", None)
    local = subprocess.Popen(script.split(), cwd=REPO, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    results = {}
    with cluster.Cluster(args.build, workers=4) as c:
        jobs = {guard: c.submit("--name=guard-" + guard, "--workers=2", "--consistency=sync",
                                "--optimizer=momentum", "--lr=0.02", *BREAKER,
                                *(["--precision_bound=-1"] if guard == "off" else []),
                                "--workdir", REPO, "--entrypoint", script)
                for guard in ("on", "off")}
        out, _ = local.communicate(timeout=600)
        m = re.search(r"final test accuracy ([0-9.]+) after (\d+) clocks", out)
        cluster.check(local.returncode == 0 and m, "single-process run failed:\n" + out)
        base = float(m.group(1))
        for guard, job in jobs.items():
            st = c.wait_job(job, timeout=600)
            status = c.cli("status", job).stdout
            print("--- guard %s\n%s" % (guard, status))
            cluster.check(st["state"] == "COMPLETED", "job %s: %s" % (job, st["state"]))
            results[guard] = (st.get("progress", {}).get("accuracy", 0.0), status)
        flushes = c.shard_metric("gs_shard_push_error_clocks")
    on, off = results["on"][0], results["off"][0]
    print("single-process %.4f; guard on %.4f (%+.1f pt); guard off %.4f (%+.1f pt)" %
          (base, on, 100 * (on - base), off, 100 * (off - base)))
    cluster.check(on >= base - 0.02, "the guarded job lost more than 2 points")
    cluster.check(off < 0.3, "the unguarded job trained (%.4f): the breaker did not break" % off)
    m = re.search(r"push error:\s+push error <= ([0-9.e+]+) clocks of gradient over \d+ "
                  r"tensors \(bound [0-9.]+\), (\d+) exact sends", results["on"][1])
    cluster.check(m and int(m.group(2)) > 0, "status shows no exact pushes for the guarded job")
    # Raised, a path goes to int4 first (an eighth of fp32's bytes), which
    # passes what twobit could not, so no tensor needs fp32.
    cluster.check(re.search(r"push error:.*; int4: \S", results["on"][1]) and
                  "; fp32:" not in results["on"][1].split("push error:")[1].split("\n")[0],
                  "status does not show the guarded job's tensors raised to int4")
    m = re.search(r"push error <= ([0-9.e+]+) clocks .*\(measured only\), 0 exact sends",
                  results["off"][1])
    cluster.check(m and float(m.group(1)) > 8, "the unguarded job's error is not past the bound")
    cluster.check(flushes > 0, "no gs_shard_push_error_clocks series")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
