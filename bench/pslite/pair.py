#!/usr/bin/env python3
"""Paired, interleaved step timing of several step loops (see gs_step_loop.cc).

    pair.py --reps 15 --warmup 2 BASE='cmd ...' CASE='cmd ...' [CASE2='cmd ...']

Each command is started once and speaks the step-loop protocol on its
stdin/stdout ("ready <pid>", then "<push ms> <pull ms> <faults> [<server CPU
ms of the push>]" per "step").
Every repetition runs one step of the baseline, then one step of each case
right after it (the order of the cases rotates), so load drift on a shared
host hits both members of a pair alike. Printed per case: median push and
pull ms, median page faults and server CPU ms of the push, and the median
over repetitions of the per-pair ratio baseline time / case time (> 1: the
case is faster), for wall time and, where both report it, server CPU time.
Only the standard library: any python3 runs it.
"""
import shlex
import statistics
import subprocess
import sys


def parse_args(argv):
    reps, warmup, cases = 15, 2, []
    it = iter(argv)
    for a in it:
        if a == "--reps":
            reps = int(next(it))
        elif a == "--warmup":
            warmup = int(next(it))
        elif "=" in a:
            name, cmd = a.split("=", 1)
            cases.append((name, cmd))
        else:
            sys.exit(f"pair.py: unexpected argument {a!r}")
    if len(cases) < 2:
        sys.exit("pair.py: need a baseline and at least one case (NAME='command')")
    return reps, warmup, cases


class Loop:
    def __init__(self, name, cmd):
        self.name = name
        self.proc = subprocess.Popen(["bash", "-c", cmd], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        # Children of the loop (a gs_shard) may print on the same stdout:
        # lines that are not the protocol's are skipped.
        while not self._line().startswith("ready "):
            pass
        self.push, self.pull, self.faults, self.cpu = [], [], [], []

    def _line(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name}: exited (code {self.proc.wait()})")
        return line.strip()

    def step(self, record):
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        while True:
            fields = self._line().split()
            try:
                push, pull, faults = float(fields[0]), float(fields[1]), int(fields[2])
                cpu = float(fields[3]) if len(fields) == 4 else 0.0
                if len(fields) in (3, 4):
                    break
            except (ValueError, IndexError):
                pass
        if record:
            self.push.append(push)
            self.pull.append(pull)
            self.faults.append(faults)
            self.cpu.append(cpu)
        return push, pull, cpu

    def close(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except Exception:  # a hung loop must not hang the report
            self.proc.kill()


def main():
    reps, warmup, specs = parse_args(sys.argv[1:])
    loops = []
    try:
        for name, cmd in specs:
            print(f"starting {name}: {cmd}", flush=True)
            loops.append(Loop(name, cmd))
        base, cases = loops[0], loops[1:]
        ratios = {c.name: ([], [], []) for c in cases}
        for rep in range(warmup + reps):
            record = rep >= warmup
            order = cases[rep % len(cases):] + cases[:rep % len(cases)]
            for c in order:
                bp, bl, bc = base.step(record)
                cp, cl, cc = c.step(record)
                if record:
                    ratios[c.name][0].append(bp / cp)
                    if cl > 0 and bl > 0:
                        ratios[c.name][1].append(bl / cl)
                    if cc > 0 and bc > 0:
                        ratios[c.name][2].append(bc / cc)
        med = statistics.median
        print(f"\n{'loop':<24} {'push ms':>9} {'pull ms':>9} {'push faults':>12} "
              f"{'server CPU ms':>14}  (medians of {reps} reps)")
        for l in loops:
            print(f"{l.name:<24} {med(l.push):9.1f} {med(l.pull):9.1f} {med(l.faults):12.0f} "
                  f"{med(l.cpu):14.1f}")
        print(f"\nper-pair ratio {base.name} time / case time (> 1: case faster), median:")
        for c in cases:
            push, pull, cpu = ratios[c.name]
            nan = float("nan")
            print(f"  {c.name:<22} push {med(push):6.3f}   pull {med(pull) if pull else nan:6.3f}"
                  f"   push server CPU {med(cpu) if cpu else nan:6.3f}   (push ratios "
                  f"{' '.join(f'{r:.2f}' for r in sorted(push))})")
    finally:
        for l in loops:
            l.close()


if __name__ == "__main__":
    main()
