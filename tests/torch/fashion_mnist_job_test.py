#!/usr/bin/env python3
"""The Fashion-MNIST example as a job: submitted with the CLI to 2 workers
(codec twobit, sync), it completes, reaches a sane test accuracy and pushes
at most 1/15 of fp32's bytes. A short run (a subset of the images) so it
stays well under a minute on 2 cores."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = "/usr/share/datasets/fashion-mnist"


def main():
    args = cluster.main_args()
    cluster.require_torch()
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print("SKIP: no Fashion-MNIST in %s (apt-get install dataset-fashion-mnist)" % DATA)
        return cluster.SKIP
    with cluster.Cluster(args.build, workers=2) as c:
        cmd = ("%s examples/fashion_mnist/train.py --epochs 1 --train_limit 6000 "
               "--test_limit 2000 --eval_every 20" % sys.executable)
        job = c.submit("--name=fmnist", "--workers=2", "--codec=twobit", "--consistency=sync",
                       "--optimizer=momentum", "--lr=0.05", "--workdir", REPO,
                       "--entrypoint", cmd)
        st = c.wait_job(job, timeout=150)
        print(c.cli("status", job).stdout)
        p = st.get("progress", {})
        acc = p.get("accuracy", 0.0)
        sent, fp32 = int(p.get("bytes_pushed", 0)), int(p.get("fp32_bytes_pushed", 0))
        ratio = fp32 / sent if sent else 0.0
        print("state %s, accuracy %.4f, pushed %d bytes (fp32 %d, x%.1f)" %
              (st["state"], acc, sent, fp32, ratio))
        ok = st["state"] == "COMPLETED" and acc >= 0.6 and ratio >= 15.0
        if not ok:
            c.dump_logs()
    print("PASS" if ok else "FAIL: want COMPLETED, accuracy >= 0.6, compression >= 15x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
