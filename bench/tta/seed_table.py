#!/usr/bin/python3
"""Final accuracy per seed, mean and spread, and the worst same-seed gap at
any evaluation after the first, of two systems across the seed runs of one
family (run.py --seed S --name STEM-sS):

    bench/tta/seed_table.py bench/tta/results/seeds-vit
    bench/tta/seed_table.py bench/tta/results/ctl-seeds-resnet --base ddp-fp32
"""
import argparse, glob, json, re, statistics


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("stem", help="results path up to -sS.json")
    ap.add_argument("--system", default="gs-defaults")
    ap.add_argument("--base", default="ddp-fp32")
    args = ap.parse_args()
    by = {}  # system -> seed -> evals
    for f in sorted(glob.glob(args.stem + "-s*.json")):
        m = re.search(r"-s(\d+)\.json$", f)
        if not m:
            continue
        for r in json.load(open(f))["runs"]:
            if r.get("status") == "ok":
                by.setdefault(r["system"], {})[int(m.group(1))] = r["evals"]
    for name, runs in sorted(by.items()):
        finals = [runs[s][-1]["accuracy"] for s in sorted(runs)]
        print("%-12s seeds %s finals %s mean %.4f sd %.4f" % (
            name, sorted(runs), " ".join("%.4f" % v for v in finals), statistics.mean(finals),
            statistics.pstdev(finals)))
    a, b = by.get(args.system, {}), by.get(args.base, {})
    gaps = [ea["accuracy"] - eb["accuracy"] for s in a if s in b
            for ea, eb in list(zip(a[s], b[s]))[2:]]  # after step 0 and the first eval
    if gaps:
        print("worst %s - %s at any eval after the first, same seed: %+.4f" % (
            args.system, args.base, min(gaps)))


if __name__ == "__main__":
    main()
