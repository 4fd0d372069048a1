"""Tables and plots of bench/tta/run.py's runs: <stem>.md and one
<stem>-<model>.png per model (gnuplot, one panel per rate).

Per (model, rate, system), over its rounds: the median of the runs' median
and p90 step times (rank 0, evaluations excluded, the first step -- DDP's
bucket set-up, gradstream's first pull -- left out), the median accuracy
at the last evaluation, and the time to target: the training time (sum of
step times) at the first evaluation whose accuracy reaches what DDP fp32
reached at its last evaluation in the same round, rate and model.
"""

import os
import shutil
import statistics
import subprocess
import tempfile


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else None


def step_ms(rec):
    s = rec.get("step_s") or []
    s = s[1:] if len(s) > 1 else s
    return (1000 * statistics.median(s), 1000 * pct(s, 0.9)) if s else (None, None)


def final(rec):
    ev = rec.get("evals") or []
    return ev[-1] if ev else None


def time_to(rec, target):
    for e in rec.get("evals") or []:
        if target is not None and e["accuracy"] >= target:
            return e["train_s"]
    return None


def label(rate):
    return "unshaped" if rate == "none" else rate + "/s"


def one_line(rec):
    med, p90 = step_ms(rec)
    f = final(rec)
    return "%s: %s, %s/%s steps, %s ms/step (p90 %s), accuracy %s%s" % (
        rec["system"], rec["status"], rec.get("steps", 0), rec["steps_wanted"],
        "%.0f" % med if med else "-", "%.0f" % p90 if p90 else "-",
        "%.4f" % f["accuracy"] if f else "-",
        (" (%s)" % rec["error"].splitlines()[0]) if rec.get("error") else "")


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec="%.0f"):
    return "-" if x is None else spec % x


def groups(runs):
    out = {}
    for r in runs:
        out.setdefault((r["model"], r["rate"]), {}).setdefault(r["system"], []).append(r)
    return out


def targets(runs):
    """(model, rate, round) -> DDP fp32's accuracy at its last evaluation."""
    t = {}
    for r in runs:
        if r["system"] == "ddp-fp32" and r["status"] == "ok" and final(r):
            t[(r["model"], r["rate"], r["round"])] = final(r)["accuracy"]
    return t


def table(runs):
    tg = targets(runs)
    lines = []
    order = {s: i for i, s in enumerate(dict.fromkeys(r["system"] for r in runs))}
    for (model, rate), by_sys in groups(runs).items():
        steps = max(r["steps_wanted"] for rs in by_sys.values() for r in rs)
        lm = model == "lstm"
        lines += ["", "### %s, %s, %d steps" % (model, label(rate), steps), "",
                  "| system | ok/runs | ms/step median | p90 | accuracy at the end%s | "
                  "time to DDP fp32's final accuracy (s) | MB/step per worker (sent + received) | "
                  "CPU s/step: per process (sum) |" % (" (perplexity)" if lm else ""),
                  "|---|---|---|---|---|---|---|---|"]
        for system in sorted(by_sys, key=order.get):
            rs = by_sys[system]
            ok = [r for r in rs if r["status"] == "ok"]
            use = ok or rs
            m = [step_ms(r) for r in use]
            acc = med([final(r)["accuracy"] for r in use if final(r)])
            ppl = med([final(r)["perplexity"] for r in use if final(r)])
            reached = [time_to(r, tg.get((model, rate, r["round"]))) for r in use]
            tta = med(reached)
            mb = med([statistics.mean(sum(x) for x in r["script_tx_rx_per_step"]) / 1e6
                      for r in use if r.get("script_tx_rx_per_step")])
            cpu = {}
            for r in use:
                for p, v in (r.get("cpu_s_per_step") or {}).items():
                    cpu.setdefault(p, []).append(v)
            cpu = {p: med(v) for p, v in cpu.items()}
            cpu_s = " ".join("%s %.3f" % (p, v) for p, v in sorted(cpu.items()))
            status = "%d/%d" % (len(ok), len(rs))
            if len(ok) < len(rs):
                status += " (%s)" % ",".join(sorted({r["status"] for r in rs} - {"ok"}))
            lines.append("| %s | %s | %s | %s | %s%s | %s | %s | %s (%s) |" % (
                system, status, fmt(med([x[0] for x in m])), fmt(med([x[1] for x in m])),
                fmt(acc, "%.4f"), (" (%s)" % fmt(ppl, "%.2f")) if lm else "",
                fmt(tta, "%.1f") + ("" if tta is None or len([x for x in reached if x]) ==
                                    len(use) else " (%d/%d)" % (len([x for x in reached if x]),
                                                                len(use))),
                fmt(mb, "%.2f"), cpu_s or "-", fmt(sum(cpu.values()) if cpu else None, "%.3f")))
        # Accuracy at every evaluation point (median over rounds).
        pts = sorted({e["step"] for rs in by_sys.values() for r in rs for e in r.get("evals", [])})
        lines += ["", "accuracy at each evaluation step:", "",
                  "| system | " + " | ".join(str(p) for p in pts) + " |",
                  "|---|" + "---|" * len(pts)]
        for system in sorted(by_sys, key=order.get):
            accs = {}
            for r in by_sys[system]:
                for e in r.get("evals", []):
                    accs.setdefault(e["step"], []).append(e["accuracy"])
            lines.append("| %s | " % system + " | ".join(
                fmt(med(accs.get(p, [])), "%.3f") for p in pts) + " |")
    return lines


def plot(runs, stem):
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        return []
    made = []
    tmp = tempfile.mkdtemp(prefix="tta-plot-")
    models = list(dict.fromkeys(r["model"] for r in runs))
    for model in models:
        rates = list(dict.fromkeys(r["rate"] for r in runs if r["model"] == model))
        png = "%s-%s.png" % (stem, model)
        script = ['set terminal pngcairo size %d,600 noenhanced font "sans,10"' %
                  (700 * len(rates)), 'set output "%s"' % png,
                  "set multiplot layout 1,%d title \"%s: test accuracy against training time "
                  "(rank 0, evaluations excluded; first round)\"" % (len(rates), model),
                  "set key bottom right", "set grid", "set xlabel \"training time (s)\"",
                  "set ylabel \"%s\"" % ("next-character accuracy" if model == "lstm"
                                         else "test accuracy")]
        for rate in rates:
            first = {}
            for r in runs:
                if r["model"] == model and r["rate"] == rate and r.get("evals"):
                    first.setdefault(r["system"], r)
            plots = []
            for system, r in first.items():
                dat = os.path.join(tmp, "%s-%s-%s.dat" % (model, rate, system))
                with open(dat, "w") as f:
                    for e in r["evals"]:
                        f.write("%f %f\n" % (e["train_s"], e["accuracy"]))
                plots.append("\"%s\" using 1:2 with linespoints title \"%s%s\"" % (
                    dat, system, "" if r["status"] == "ok" else " (%s)" % r["status"]))
            script += ["set title \"%s\"" % label(rate),
                       "plot " + ", ".join(plots)]
        script.append("unset multiplot")
        r = subprocess.run([gnuplot], input="\n".join(script) + "\n", text=True,
                           capture_output=True)
        if r.returncode == 0:
            made.append(png)
        else:
            print("gnuplot failed for %s: %s" % (model, r.stderr.strip()))
    shutil.rmtree(tmp, ignore_errors=True)
    return made


def write(runs, stem):
    pngs = plot(runs, stem)
    lines = ["# Time to accuracy: gradstream against DDP", ""]
    lines += ["Plots: " + ", ".join(os.path.basename(p) for p in pngs)] if pngs else []
    lines += table(runs)
    with open(stem + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
