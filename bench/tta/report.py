"""Tables and plots of bench/tta/run.py's runs: <stem>.md and one
<stem>-<model>.png per model (gnuplot, one panel per rate).

Per (model, rate, system), over its rounds: the median of the runs' median
and p90 step times (rank 0, evaluations excluded, the first step -- DDP's
bucket set-up, gradstream's first pull -- left out), the median accuracy
at the last evaluation, and the time to target: the training time (sum of
step times) at the first evaluation whose accuracy reaches what DDP fp32
reached at its last evaluation in the same round, rate and model.

NOTE: [timing and accuracy runs] The full grid (3 families x 3 rates x
every system x 3 rounds) does not fit a working day on 2 cores at full
length, so it runs as two kinds of run, told apart by their evaluations:
  - timing runs (an evaluation at step 0 and at the end only): short,
    3 paired, interleaved rounds at every rate; they give the step times,
    bytes and CPU seconds per step;
  - accuracy runs (evaluations along the way): one full-length run per
    system and family, unshaped. In sync mode the link changes when a
    step ends, not what it computes (same seeds, same samples, the same
    sums), so a family's accuracy at step k is the same at every rate.
summary() joins them: the time to DDP fp32's final accuracy at a rate is
(the first evaluated step reaching it, from the accuracy run) x (the
median step time at that rate, from the timing runs), and the plot draws
each accuracy run against that time axis.
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
        lm = model in ("lstm", "wordlm")
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


def draw(stem, panels, how):
    """One <stem>-<model>.png per model of panels = {model: [(rate, [(title,
    [(x, y), ...]), ...]), ...]}: one panel per rate, accuracy against
    training time; `how` says how the time axis was made. The PNGs made."""
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        return []
    made = []
    tmp = tempfile.mkdtemp(prefix="tta-plot-")
    for model, by_rate in panels.items():
        png = "%s-%s.png" % (stem, model)
        script = ['set terminal pngcairo size %d,600 noenhanced font "sans,10"' %
                  (700 * len(by_rate)), 'set output "%s"' % png,
                  "set multiplot layout 1,%d title \"%s: test accuracy against training time "
                  "(%s)\"" % (len(by_rate), model, how),
                  "set key bottom right", "set grid", "set xlabel \"training time (s)\"",
                  "set ylabel \"%s\"" % ({"lstm": "next-character accuracy",
                                          "wordlm": "next-word accuracy"}.get(
                                              model, "test accuracy"))]
        for rate, series in by_rate:
            plots = []
            for k, (title, points) in enumerate(series):
                dat = os.path.join(tmp, "%s-%s-%d.dat" % (model, rate, k))
                with open(dat, "w") as f:
                    f.writelines("%f %f\n" % xy for xy in points)
                plots.append("\"%s\" using 1:2 with linespoints title \"%s\"" % (dat, title))
            if plots:
                script += ["set title \"%s\"" % label(rate), "plot " + ", ".join(plots)]
        script.append("unset multiplot")
        r = subprocess.run([gnuplot], input="\n".join(script) + "\n", text=True,
                           capture_output=True)
        if r.returncode == 0:
            made.append(png)
        else:
            print("gnuplot failed for %s: %s" % (model, r.stderr.strip()))
    shutil.rmtree(tmp, ignore_errors=True)
    return made


def plot(runs, stem):
    """Each system's first run per (model, rate), against its own training time."""
    panels = {}
    for model in dict.fromkeys(r["model"] for r in runs):
        for rate in dict.fromkeys(r["rate"] for r in runs if r["model"] == model):
            first = {}
            for r in runs:
                if r["model"] == model and r["rate"] == rate and r.get("evals"):
                    first.setdefault(r["system"], r)
            panels.setdefault(model, []).append((rate, [
                (system + ("" if r["status"] == "ok" else " (%s)" % r["status"]),
                 [(e["train_s"], e["accuracy"]) for e in r["evals"]])
                for system, r in first.items()]))
    return draw(stem, panels, "rank 0, evaluations excluded; first round")


def is_accuracy_run(rec):
    """See [timing and accuracy runs]."""
    return len(rec.get("evals") or []) > 2


def round_ratios(timing, num, den):
    """Per round, den's median step / num's (> 1: num faster); paired."""
    by = {}
    for r in timing:
        if r["status"] == "ok" and r["system"] in (num, den):
            by.setdefault((r.get("invocation"), r["round"]), {})[r["system"]] = step_ms(r)[0]
    return [v[den] / v[num] for v in by.values() if v.get(num) and v.get(den)]


def loop_cpu(per_process):
    """CPU seconds per step of every process. Rank 1's script figure stands
    for rank 0's too: runs before train.py's fix subtracted rank 0's step-0
    evaluation from its loop (negative figures), and rank 0 does rank 1's
    work per step otherwise (its evaluations are left out either way)."""
    out = dict(per_process)
    if "script1" in out:
        out["script0"] = out["script1"]
    return sum(out.values())


def summary(runs):
    """The grid of timing runs joined with the accuracy runs (see [timing and
    accuracy runs]), one table per model."""
    acc = {(r["model"], r["system"]): r for r in runs if is_accuracy_run(r) and r.get("evals")}
    timing = [r for r in runs if not is_accuracy_run(r)]
    lines = []
    for model in dict.fromkeys(r["model"] for r in runs):
        rates = list(dict.fromkeys(r["rate"] for r in timing if r["model"] == model))
        systems = list(dict.fromkeys(r["system"] for r in runs if r["model"] == model))
        ref = acc.get((model, "ddp-fp32"))
        target = final(ref)["accuracy"] if ref else None
        ref_acc = {e["step"]: e["accuracy"] for e in ref["evals"]} if ref else {}
        rounds = len({r["round"] for r in timing if r["model"] == model})
        lines += ["", "### %s: %d timing rounds per rate%s" % (
            model, rounds, ", accuracy runs of %d steps (target: DDP fp32's final %.4f)" % (
                ref["steps_wanted"], target) if ref else ""), "",
            "| system | " + " | ".join(
                "%s: ms/step median (p90) | x DDP fp16 | x DDP fp32 | time to target / to "
                "target - 1 pt (s)" %
                label(rt) for rt in rates) +
            " | MB/step per worker | CPU s/step, all processes (1gbit) | accuracy at the end |"
            " worst gap to DDP fp32 at an evaluation (pt, at step) |",
            "|---|" + "---|---|---|---|" * len(rates) + "---|---|---|---|"]
        for system in systems:
            cells = []
            a = acc.get((model, system))
            steps_to = near_to = None
            if a and target is not None:
                steps_to = next((e["step"] for e in a["evals"] if e["accuracy"] >= target), None)
                near_to = next((e["step"] for e in a["evals"]
                                if e["accuracy"] >= target - 0.01), None)
            for rt in rates:
                rs = [r for r in timing if r["model"] == model and r["rate"] == rt and
                      r["system"] == system]
                ok = [r for r in rs if r["status"] == "ok"]
                m = [step_ms(r) for r in ok]
                mm = med([x[0] for x in m])
                same = [r for r in timing if r["model"] == model and r["rate"] == rt]
                x16 = med(round_ratios(same, system, "ddp-fp16"))
                x32 = med(round_ratios(same, system, "ddp-fp32"))
                status = "" if len(ok) == len(rs) else " [%d/%d ok]" % (len(ok), len(rs))
                cells += ["%s (%s)%s" % (fmt(mm), fmt(med([x[1] for x in m])), status),
                          fmt(x16, "%.2f"), fmt(x32, "%.2f"),
                          "%s / %s" % (
                              fmt(steps_to * mm / 1000 if steps_to and mm else None, "%.1f"),
                              fmt(near_to * mm / 1000 if near_to and mm else None, "%.1f"))]
            one = [r for r in timing if r["model"] == model and r["system"] == system and
                   r["status"] == "ok"]
            mb = med([statistics.mean(sum(x) for x in r["script_tx_rx_per_step"]) / 1e6
                      for r in one if r.get("script_tx_rx_per_step")])
            cpu = med([loop_cpu(r["cpu_s_per_step"]) for r in one
                       if r["rate"] == "1gbit" and r.get("cpu_s_per_step")])
            gap = None
            if a and ref_acc:
                gaps = [(100 * (e["accuracy"] - ref_acc[e["step"]]), e["step"])
                        for e in a["evals"] if e["step"] in ref_acc and e["step"] > 0]
                gap = min(gaps) if gaps else None
            lines.append("| %s | %s | %s | %s | %s | %s |" % (
                system, " | ".join(cells), fmt(mb, "%.2f"), fmt(cpu, "%.3f"),
                fmt(final(a)["accuracy"], "%.4f") if a else "-",
                "%+.1f at %d" % gap if gap else "-"))
        for rt in rates:
            same = [r for r in timing if r["model"] == model and r["rate"] == rt]
            for job in ("gs-defaults", "gs-defaults-1worker"):
                q = round_ratios(same, "local-half", job)
                if q:
                    lines += ["", "%s's step / the script's single-process step on one "
                              "worker's share (local-half), %s, per round: %s (median %.2f)" % (
                                  job, label(rt), " ".join("%.2f" % x for x in q), med(q))]
        if ref:
            pts = [e["step"] for e in ref["evals"]]
            lines += ["", "accuracy at each evaluation (accuracy runs, unshaped):", "",
                      "| system | " + " | ".join(str(p) for p in pts) + " |",
                      "|---|" + "---|" * len(pts)]
            for system in systems:
                a = acc.get((model, system))
                if a:
                    got = {e["step"]: e["accuracy"] for e in a["evals"]}
                    lines.append("| %s | %s |" % (system, " | ".join(
                        fmt(got.get(p), "%.3f") for p in pts)))
    return lines


def plot_summary(runs, stem):
    """Per model, one panel per rate: each accuracy run's evaluations against
    step x that rate's median step time (see [timing and accuracy runs])."""
    acc = [r for r in runs if is_accuracy_run(r) and r.get("evals")]
    timing = [r for r in runs if not is_accuracy_run(r) and r["status"] == "ok"]
    panels = {}
    for model in dict.fromkeys(r["model"] for r in acc):
        for rate in dict.fromkeys(r["rate"] for r in timing if r["model"] == model):
            series = []
            for a in [r for r in acc if r["model"] == model]:
                ms = med([step_ms(r)[0] for r in timing if r["model"] == model and
                          r["rate"] == rate and r["system"] == a["system"]])
                if ms is not None:
                    series.append((a["system"], [(e["step"] * ms / 1000, e["accuracy"])
                                                 for e in a["evals"]]))
            panels.setdefault(model, []).append((rate, series))
    return draw(stem, panels, "step x median step time at the rate")


def write(runs, stem):
    joined = any(is_accuracy_run(r) for r in runs) and any(
        not is_accuracy_run(r) for r in runs)
    pngs = plot_summary(runs, stem) if joined else plot(runs, stem)
    lines = ["# Time to accuracy: gradstream against DDP", ""]
    lines += ["Plots: " + ", ".join(os.path.basename(p) for p in pngs)] if pngs else []
    if joined:
        lines += ["", "## Summary (see [timing and accuracy runs] in report.py)"] + summary(runs)
        lines += ["", "## Timing runs"] + table([r for r in runs if not is_accuracy_run(r)])
        lines += ["", "## Accuracy runs"] + table([r for r in runs if is_accuracy_run(r)])
    else:
        lines += table(runs)
    with open(stem + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
