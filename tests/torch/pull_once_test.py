"""A pull is asked once and answered once, however long it takes (see
[step loop] in worker/client/step_loop.h). Two cases,
each a script job of 2 workers on 2 shards through the package:

  --case slow_link: the workers behind a 10 Mbit/s link (netns + tc, as
    bench/netns_shaped.sh): each full pull of the 1.6M-parameter model
    takes about 10 s on the wire, 20 times the loop's wait slice and 5 times
    the 2 s after which a loop that re-asks would ask again (and never
    finish).
  --case straggler: on loopback, rank 1 sleeps 12 s before its first
    backward while rank 0's pull of clock 1 waits for its round, with 60
    chunks on the shards; a loop that asked again every 2 s without
    cancelling would pass 16 parked pulls per stream, and the shard would
    fail the healthy worker's pull with RESOURCE_EXHAUSTED.

Each asserts that the job completed and, from the shards' metrics, that
the shards sent every pull's bytes exactly once: workers x pulls x model
bytes (a pull at join, one per step), with nothing discarded.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--case", choices=("slow_link", "straggler"), required=True)
    args = ap.parse_args()
    if args.case == "slow_link":
        why = cluster.ShapedLink.missing()
        if why:
            print("SKIP: the shaped link needs network namespaces: %s" % why)
            sys.exit(cluster.SKIP)
    cluster.require_torch()
    steps, dims, flags, link = 2, (1280, 1250), [], None
    script = "%s %s/scripts/pull_once.py --steps %d" % (sys.executable, HERE, steps)
    if args.case == "slow_link":
        link = cluster.ShapedLink("10mbit")
    else:
        dims = (250, 240)
        script += " --dim_in 250 --dim_out 240 --straggle_rank 1 --straggle_s 12"
        flags = ["--chunk_elems=1024"]
    model_bytes = (dims[0] * dims[1] + dims[1]) * 4
    try:
        with cluster.Cluster(args.build, workers=2, link=link) as c:
            # fp32 pulls (the defaults compress them, see [default policy]), so
            # that every pull is one model's worth of bytes.
            job = c.submit("--workers=2", "--entrypoint=" + script, "--workdir=" + HERE,
                           "--optimizer=sgd", "--lr=0.01", "--pull_codec=none", *flags)
            st = c.wait_job(job, timeout=240)
            cluster.check(st.get("state") == "COMPLETED", "job ended %s: %s" %
                          (st.get("state"), st.get("message", "")))
            pulls = 2 * (steps + 1)
            sent = c.shard_metric("gs_shard_pull_bytes_total")
            print("%s: job COMPLETED; shards sent %d pull bytes = %d pulls x %d bytes "
                  "(expected %d)" % (args.case, sent, sent // model_bytes, model_bytes,
                                     pulls * model_bytes))
            cluster.check(sent == pulls * model_bytes,
                          "shards sent %d pull bytes, want %d (%d pulls of %d)" %
                          (sent, pulls * model_bytes, pulls, model_bytes))
            discarded = st.get("progress", {}).get("bytes_pulled_discarded", 0)
            cluster.check(int(discarded) == 0, "discarded %s pull bytes" % discarded)
    finally:
        if link:
            link.close()


if __name__ == "__main__":
    main()
