#!/usr/bin/env python3
"""Bad use gets a clear error: a second rank declaring other tensors, a
float64 model, a gradient changed in place before ps.step(), a table's
ids_of that returns no tensor, an accuracy reported as a percentage, a
script that exits non-zero, one that never calls init, one that exits 0
without it. Each fails its job with a message that says so (the exit code,
the last stderr lines), within bounded time."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable
BAD = os.path.join(HERE, "scripts", "bad_use.py")

CASES = [
    # (name, entrypoint, workers, what the job's message must contain)
    ("other tensors on rank 1", "%s %s --case shape" % (PY, BAD), 2,
     ["exited with code 1", "tensor 0 is weight [5, 4] in this script but weight [3, 4]",
      "every rank must run the same model"]),
    ("float64 model", "%s %s --case dtype" % (PY, BAD), 1,
     ["exited with code 1", "parameter 'weight' is torch.float64", "only torch.float32"]),
    ("grad changed before step", "%s %s --case clip" % (PY, BAD), 1,
     ["exited with code 1", "was changed in place between backward() and ps.step()"]),
    ("ids_of not a tensor", "%s %s --case ids_of" % (PY, BAD), 1,
     ["exited with code 1", "ids_of of table '0.table' returned list, want a tensor of ids"]),
    ("accuracy of 85", "%s %s --case accuracy" % (PY, BAD), 1,
     ["exited with code 3", "accuracy 85 is outside [0, 1]: report a fraction",
      "5 more steps after the refusal"]),
    ("script exits 3", "%s -c \"import sys; print('boom: bad input', file=sys.stderr); "
     "sys.exit(3)\"" % PY, 1, ["exited with code 3", "boom: bad input"]),
    ("never calls init", "sleep 60", 1,
     ["did not call gradstream's init within 20s"]),
    ("exits 0 without init", "true", 1, ["exited with code 0 without calling gradstream's init"]),
]


def main():
    args = cluster.main_args()
    cluster.require_torch()
    failed = []
    with cluster.Cluster(args.build, workers=2,
                         worker_flags=["--script_init_timeout_s=20"]) as c:
        for name, cmd, workers, want in CASES:
            job = c.submit("--name=bad", "--workers=%d" % workers, "--entrypoint", cmd)
            st = c.wait_job(job, timeout=60)
            msg = st.get("message", "")
            ok = st["state"] == "FAILED" and all(w in msg for w in want)
            print("%-24s %s: %s\n    %s" % (name, "ok" if ok else "WRONG", st["state"],
                                          msg.replace("\n", "\n    ")))
            if not ok:
                failed.append(name)
            # the workers are back in the pool before the next case
            c.wait_for(lambda: all(w.get("state", "IDLE") == "IDLE"
                                   for w in c.cli_json("cluster").get("workers", [])),
                       30, "workers idle")
    if failed:
        print("FAIL: %s" % ", ".join(failed))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
