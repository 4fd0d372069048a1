#!/usr/bin/python3
"""Final accuracy per seed, mean and spread, and the worst same-seed gap at
any evaluation after the first, of two systems across the seed runs of one
family (run.py --seed S --name STEM-sS):

    bench/tta/seed_table.py bench/tta/results/seeds-vit
    bench/tta/seed_table.py bench/tta/results/ctl-seeds-resnet --base ddp-fp32
    bench/tta/seed_table.py bench/tta/results/rseed-vit --system gs-defaults-seed2 \
        --base gs-defaults --base_stem bench/tta/results/host4-vit
    bench/tta/seed_table.py bench/tta/results/s16-widecnn --base_stem \
        bench/tta/results/ctl-seeds-widecnn --base_stem bench/tta/results/t512-widecnn --by_step

--base_stem reads other runs of the same seeds (the base system's, say); a
system given as its own base is read from them only (a change against the
same system's earlier runs).
"""
import argparse, glob, json, re, statistics


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("stem", help="results path up to -sS.json")
    ap.add_argument("--system", default="gs-defaults")
    ap.add_argument("--base", default="ddp-fp32")
    ap.add_argument("--base_stem", action="append", default=[],
                    help="more runs of the same seeds to read (repeatable; the first a "
                         "seed's system is found in wins)")
    ap.add_argument("--by_step", action="store_true",
                    help="also print the mean same-seed gap at every evaluation")
    args = ap.parse_args()

    def read(stems):
        by = {}  # system -> seed -> evals
        for f in [f for stem in stems for f in sorted(glob.glob(stem + "-s*.json"))]:
            m = re.search(r"-s(\d+)\.json$", f)
            if not m:
                continue
            for r in json.load(open(f))["runs"]:
                if r.get("status") == "ok":
                    by.setdefault(r["system"], {}).setdefault(int(m.group(1)), r["evals"])
        return by
    by = read([args.stem] + args.base_stem)
    # A system against its own earlier runs: the base from --base_stem only.
    other = read(args.base_stem) if args.base == args.system and args.base_stem else by
    for name, runs in sorted(by.items()):
        finals = [runs[s][-1]["accuracy"] for s in sorted(runs)]
        print("%-12s seeds %s finals %s mean %.4f sd %.4f" % (
            name, sorted(runs), " ".join("%.4f" % v for v in finals), statistics.mean(finals),
            statistics.pstdev(finals)))
    a, b = by.get(args.system, {}), other.get(args.base, {})
    gaps = [ea["accuracy"] - eb["accuracy"] for s in a if s in b
            for ea, eb in list(zip(a[s], b[s]))[2:]]  # after step 0 and the first eval
    if gaps:
        print("worst %s - %s at any eval after the first, same seed: %+.4f" % (
            args.system, args.base, min(gaps)))
    seeds = sorted(s for s in a if s in b)
    if len(seeds) > 1:
        # The figures: the gap of the means (with the standard error of
        # the same-seed gaps) and the worst mean gap at an evaluation after step 0.
        final = [a[s][-1]["accuracy"] - b[s][-1]["accuracy"] for s in seeds]
        steps = [e["step"] for e in a[seeds[0]] if e["step"] > 0]
        by_step = {st: statistics.mean(ea["accuracy"] - eb["accuracy"] for s in seeds
                                       for ea, eb in zip(a[s], b[s]) if ea["step"] == st)
                   for st in steps}
        print("%s - %s over seeds %s: final %+.2f pt (se %.2f), worst mean gap %+.2f pt "
              "(step %d)" % (args.system, args.base, seeds, 100 * statistics.mean(final),
                             100 * statistics.stdev(final) / len(final) ** 0.5,
                             100 * min(by_step.values()), min(by_step, key=by_step.get)))
        if args.by_step:
            print("mean gap by step: " + ", ".join(
                "%d %+.2f" % (st, 100 * g) for st, g in sorted(by_step.items())))


if __name__ == "__main__":
    main()
