#!/usr/bin/python3
"""Per system of one or more run.py result files: ms/step (median after the
first 5 steps) by round, CPU seconds per step per process kind (a training
script, a shard, all the job's processes), MB per step per training process
and per shard namespace (sent + received), and each system's step against
the reference system's, round by round:

    bench/tta/process_table.py bench/tta/results/ctr-scale-w16.json
    bench/tta/process_table.py bench/tta/results/ctr-scale-w*.json --ref gs-defaults
"""
import argparse, json, statistics


def span(xs, fmt):
    return (fmt % min(xs)) if min(xs) == max(xs) else (fmt + "-" + fmt) % (min(xs), max(xs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+")
    ap.add_argument("--ref", default="gs-defaults", help="the system the others are against")
    args = ap.parse_args()
    for path in args.results:
        by = {}  # system -> round -> run
        for r in json.load(open(path))["runs"]:
            if r.get("status") == "ok" and len(r.get("step_s", [])) > 5:
                by.setdefault(r["system"], {})[r["round"]] = r
        if not by:
            continue
        workers = next(iter(next(iter(by.values())).values())).get("workers", 2)
        print("%s (%d workers)" % (path, workers))

        def ms(r):
            return statistics.median(r["step_s"][5:]) * 1000

        for name, rounds in by.items():
            runs = [rounds[k] for k in sorted(rounds)]
            cpu = [r["cpu_s_per_step"] for r in runs]
            kind = lambda c, p: [v * 1000 for k, v in c.items() if k.startswith(p)]
            script = [x for c in cpu for x in kind(c, "script")]
            shard = [x for c in cpu for x in kind(c, "shard")]
            total = [sum(c.values()) * 1000 for c in cpu]
            worker_mb = [sum(x) / 1e6 for r in runs for x in r["script_tx_rx_per_step"]]
            shard_mb = [v / 1e6 for r in runs for k, v in r.get("net_bytes_per_step", {}).items()
                        if k in r.get("shard_nodes", ("a", "b"))] if shard else []
            print("  %-18s ms/step %s | CPU ms/step: script %s, shard %s, all %s | MB/step: "
                  "script %s, shard ns %s" % (
                      name, " ".join("%.1f" % ms(r) for r in runs), span(script, "%.1f"),
                      span(shard, "%.1f") if shard else "-", span(total, "%.0f"),
                      span(worker_mb, "%.2f"), span(shard_mb, "%.2f") if shard_mb else "-"))
        ref = by.get(args.ref, {})
        for name, rounds in by.items():
            ratios = [ms(rounds[k]) / ms(ref[k]) for k in sorted(rounds) if k in ref]
            if name != args.ref and ratios:
                print("  %s / %s by round: %s, median %.2f" % (
                    name, args.ref, " ".join("%.2f" % x for x in ratios),
                    statistics.median(ratios)))


if __name__ == "__main__":
    main()
