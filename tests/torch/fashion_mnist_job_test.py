#!/usr/bin/env python3
"""The Fashion-MNIST example as a job: submitted with the CLI to 2 workers
(sync; twobit on fc1.weight, ternary on the small tensors), it completes,
reaches a sane test accuracy and pushes at most 1/15 of fp32's bytes. A short run (a subset of the images) so it
stays well under a minute on 2 cores."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = "/usr/share/datasets/fashion-mnist"


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--codec", default="twobit")
    ap.add_argument("--epochs", default="2")
    ap.add_argument("--train_limit", default="6000")
    # The default policy: twobit on fc1.weight (89% of the model), ternary on
    # the small tensors ([layer-wise codec]), fp32 pulls ([pull codec default]).
    ap.add_argument("--extra", default="",
                    help="more submit flags, space-separated (use --extra=...)")
    args = ap.parse_args()
    cluster.require_torch()
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print("SKIP: no Fashion-MNIST in %s (apt-get install dataset-fashion-mnist)" % DATA)
        return cluster.SKIP
    with cluster.Cluster(args.build, workers=2) as c:
        cmd = ("%s examples/fashion_mnist/train.py --epochs %s --train_limit %s "
               "--test_limit 2000 --eval_every 20" % (sys.executable, args.epochs,
                                                      args.train_limit))
        job = c.submit("--name=fmnist", "--workers=2", "--codec=" + args.codec,
                       "--consistency=sync", "--optimizer=momentum", "--lr=0.05",
                       "--workdir", REPO, "--entrypoint", cmd, *args.extra.split())
        st = c.wait_job(job, timeout=150)
        print(c.cli("status", job).stdout)
        p = st.get("progress", {})
        acc = p.get("accuracy", 0.0)
        sent, fp32 = int(p.get("bytes_pushed", 0)), int(p.get("fp32_bytes_pushed", 0))
        ratio = fp32 / sent if sent else 0.0
        print("state %s, accuracy %.4f, pushed %d bytes (fp32 %d, x%.1f)" %
              (st["state"], acc, sent, fp32, ratio))
        ok = (st["state"] == "COMPLETED" and acc >= 0.6 and
              (ratio >= 15.0 or args.codec == "none"))
        if not ok:
            c.dump_logs()
    print("PASS" if ok else "FAIL: want COMPLETED, accuracy >= 0.6, compression >= 15x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
