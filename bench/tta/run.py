#!/usr/bin/python3
"""Time to accuracy, gradstream against PyTorch DDP, on a shaped network.

    sudo bench/tta/run.py                                  # everything, 3 rounds
    sudo bench/tta/run.py --models widecnn --rates 1gbit,100mbit --rounds 1 \\
        --steps 200 --rate_steps 100mbit=60
    bench/tta/run.py --report bench/tta/results/A.json [B.json ...]   # table + PNGs again

Needs root (ip netns, tc). Every process runs in its own network namespace,
joined to a bridge by a veth pair shaped with tbf at the rate in both
directions (bench/tta/netns.py; "none" = unshaped). gradstream: ns a = shard
0 + coordinator, b = shard 1 (s2, s3, ... for more shards, @shards=N),
c, d, ... = one gs_worker each (--workers, 2 by default), which runs the
training script as its child, so the script is in the worker's namespace;
the job is submitted with the CLI (`gradstream submit --entrypoint ...`).
DDP: one gloo rank in each of c, d, ..., rendezvous over the shaped
network. Both run bench/tta/train.py: same model, seeds, samples per step
and momentum SGD.

Each round runs every (rate, model, system) once, the systems in an order
rotated by the round. Per run it records rank 0's step times (median, p90;
evaluations excluded) and the median forward, backward and update within
them, test accuracy at every evaluation, the bytes each
namespace sent and received (switch-port counters over the training loop,
the same for both systems; and gradstream's ps.stats()), and CPU seconds
per step of every process of the job (the scripts' own getrusage over their
loop; the daemons' /proc/PID/stat over the same window). A run past
--deadline is killed and recorded as "timeout" with what it reached.
Results: bench/tta/results/<stamp>.json, .md (the table), <stamp>-<model>.png
(accuracy against training time, every system, one panel per rate).
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True   # run as root: no root-owned __pycache__ in the tree
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from netns import Network  # noqa: E402
import report  # noqa: E402

# name: (system, ddp hook, or gradstream: a codec both ways, a list of submit
# flags, or None = the defaults)
SYSTEMS = {
    "ddp-fp32": ("ddp", "fp32"),
    "ddp-fp16": ("ddp", "fp16"),
    "ddp-powersgd": ("ddp", "powersgd"),
    # ctr: the table's gradient dense (nn.Embedding without sparse=True, the
    # default), all-reduced whole every step.
    "ddp-dense": ("ddp", "dense"),
    "gs-defaults": ("gradstream", None),
    "gs-none": ("gradstream", "none"),
    "gs-twobit": ("gradstream", "twobit"),
    "gs-ternary": ("gradstream", "ternary"),
    "gs-onebit": ("gradstream", "onebit"),
    # A hand-chosen codec on the pushes only; the pulls fp32, as a policy
    # that names only its push codec gets (kHandPickedPullCodec).
    "gs-onebit-push": ("gradstream", ["--codec", "onebit"]),
    "gs-twobit-push": ("gradstream", ["--codec", "twobit"]),
    "gs-onebit-push-bound2": ("gradstream", ["--codec", "onebit", "--precision_bound=2"]),
    "gs-onebit-push-bound4": ("gradstream", ["--codec", "onebit", "--precision_bound=4"]),
    "gs-twobit-push-bound4": ("gradstream", ["--codec", "twobit", "--precision_bound=4"]),
    # Without the owed-descent rule (docs/design/precision-control.md, "Owed descent").
    "gs-defaults-noowed": ("gradstream", ["--precision_max_owed=-1"]),
    "gs-onebit-push-noowed": ("gradstream", ["--codec", "onebit", "--precision_max_owed=-1"]),
    "gs-twobit-push-noowed": ("gradstream", ["--codec", "twobit", "--precision_max_owed=-1"]),
    # The hand-chosen codecs with the defaults' small tensors exact: what
    # gs-onebit-push and gs-twobit-push run since 2 Dec 2026; the -all ones
    # compress the small tensors (ternary), as they did before.
    "gs-onebit-push-small32": ("gradstream", ["--codec", "onebit", "--min_compress_elems=16384"]),
    "gs-twobit-push-small32": ("gradstream", ["--codec", "twobit", "--min_compress_elems=16384"]),
    "gs-onebit-push-all": ("gradstream", ["--codec", "onebit", "--min_compress_elems=1"]),
    "gs-twobit-push-all": ("gradstream", ["--codec", "twobit", "--min_compress_elems=1"]),
    # onebit on every tensor, small ones too (before the layer-wise rule
    # covered onebit; docs/design/codec-defaults.md, [layer-wise codec]).
    "gs-onebit-all": ("gradstream", ["--codec", "onebit", "--pull_codec", "onebit",
                                     "--twobit_min_elems=1", "--min_compress_elems=1"]),
    # Candidates for the defaults (README, "Choosing the defaults"): twobit
    # with the adaptive threshold t = mean |g + r| per chunk, and ternary
    # pushes with an adaptive-twobit or an fp32 pull; tensors under
    # pull_min_elems are pulled fp32 in each. gs-defaults is gs-ternary's
    # policy since then.
    "gs-twobit-adaptive": ("gradstream", ["--codec", "twobit", "--twobit_threshold=-1",
                                          "--pull_codec", "twobit"]),
    "gs-twobit-adaptive-fp32pull": ("gradstream", ["--codec", "twobit",
                                                   "--twobit_threshold=-1",
                                                   "--pull_codec", "none"]),
    "gs-ternary-twobitpull": ("gradstream", ["--codec", "ternary", "--pull_codec", "twobit"]),
    "gs-ternary-fp32pull": ("gradstream", ["--codec", "ternary", "--pull_codec", "none"]),
    "gs-fp32pull": ("gradstream", ["--pull_codec", "none"]),
    # The defaults before ternary512 (2 Dec 2026): one ternary scale per chunk.
    "gs-ternary-chunk": ("gradstream", ["--codec", "ternary", "--pull_codec", "ternary",
                                        "--min_compress_elems=16384"]),
    "gs-ternary-chunk-push": ("gradstream", ["--codec", "ternary", "--pull_codec", "ternary512",
                                             "--min_compress_elems=16384"]),
    # The defaults with a full-precision warm-up of N clocks
    # (docs/design/precision-control.md).
    "gs-warmup20": ("gradstream", ["--precision_warmup=20"]),
    # The defaults with a tighter error bound for every lossy path, in clocks
    # of signal (the default is kDefaultPrecisionBound, 8).
    "gs-bound4": ("gradstream", ["--precision_bound=4"]),
    "gs-bound2": ("gradstream", ["--precision_bound=2"]),
    "gs-pullbound2": ("gradstream", ["--pull_precision_bound=2"]),
    "gs-pullbound4": ("gradstream", ["--pull_precision_bound=4"]),
    # The link-aware choice (docs/design/link-choice.md): probe exact pushes.
    "gs-link": ("gradstream", ["--link_choice=on"]),
    # Ternary with a tighter clip (in sigmas of the chunk): error feedback
    # carries what is clipped to later clocks, the variance of what is sent
    # falls with the scale.
    "gs-ternary-clip1": ("gradstream", ["--ternary_clip=1"]),
    "gs-ternary-clip1.5": ("gradstream", ["--ternary_clip=1.5"]),
    "gs-ternary-noclip": ("gradstream", ["--ternary_clip=-1"]),
    # The defaults with other stochastic-rounding seeds (the job's --seed;
    # the script's own --seed keeps the model's init): how far one run's
    # accuracy moves with the rounding alone.
    "gs-defaults-seed2": ("gradstream", ["--seed=2"]),
    "gs-defaults-seed3": ("gradstream", ["--seed=3"]),
    # The package's reference: the same script single-process on one worker's
    # share of the global batch, no network -- compute alone.
    "local-half": ("local", None),
    # Single-process on the whole global batch: the reference a model that
    # fits one machine trains to (the ctr family's AUC).
    "local": ("local", "full"),
    # ... and the package's step with that compute: a 1-worker job on the
    # same share, so the second core is the shards' (the package's ratio on a
    # 2-core host, where a 2-worker job's compute alone fills both cores).
    "gs-defaults-1worker": ("gradstream", None),
    # ctr: the defaults with the table's rows on every worker, updated there
    # by a local AdaGrad and never synchronized (train.py's LocalRows): the
    # same step with no row crossing the wire, what the rows' pulls, pushes
    # and the shards' update are measured against (timing only).
    "gs-rows-local": ("gradstream", None),
    # ctr: the defaults with the table's rows fp32 both ways instead of fp16
    # ([fp16 rows] in common/job/shard_map.cc): the table's codec by name.
    "gs-rows32": ("gradstream", ["--codec_override=table.table=none"]),
    # The defaults under bounded staleness (2 clocks) instead of sync.
    "gs-bounded2": ("gradstream", ["--consistency=bounded", "--staleness=2"]),
    # TernGrad's exemptions (docs/design/precision-control.md, "Small tensors
    # exact"): the pushes of tensors under 16384 elements fp32 (the defaults
    # since then, named so that a run says which), every tensor compressed
    # (the defaults before), or the output layer's pushes fp32 (OUTPUT_LAYER,
    # per model; wordlm's is tied to its embedding).
    "gs-small32": ("gradstream", ["--min_compress_elems=16384"]),
    "gs-compress-all": ("gradstream", ["--min_compress_elems=1"]),
    "gs-out32": ("gradstream", []),
}
OUTPUT_LAYER = {"widecnn": "fc3", "resnet": "fc", "vit": "head", "lstm": "head"}
SCRIPT_FLAGS = {"gs-rows-local": ["--ctr_table", "local"]}
ONE_WORKER = {"gs-defaults-1worker"}


def parse_system(name):
    """A system name is a SYSTEMS key, optionally with gradstream options
    after '@', joined by '@': 'base' runs every gradstream binary and the
    package from --base_build (a before/after pair in one invocation);
    'buckets=F:R' sets the package's push bucket bounds in bytes
    (GRADSTREAM_BUCKET_BYTES, see worker/capi/gradstream_c.h); 'answer=N' the
    shards' --pull_answer_bytes; 'prefetch=0' turns the package's row
    prefetch off (GRADSTREAM_ROW_PREFETCH, [row prefetch] in
    python/gradstream/parameter_server.py); 'shards=N' runs N shards instead of
    2, each in its own namespace (shard_nodes); 'threads=N' the shards'
    --executor_threads. Returns (SYSTEMS entry, {option: value})."""
    key, *opts = name.split("@")
    if key not in SYSTEMS:
        raise KeyError(key)
    parsed = {}
    for o in opts:
        k, _, v = o.partition("=")
        if k not in ("base", "buckets", "answer", "prefetch", "shards", "threads") or \
                (k == "base") != (v == "") or \
                (k in ("shards", "threads") and not (v.isdigit() and int(v) >= 1)):
            raise KeyError(name)
        parsed[k] = v
    if parsed and SYSTEMS[key][0] != "gradstream":
        raise KeyError(name)
    return SYSTEMS[key], parsed
LR = {"widecnn": 0.02, "resnet": 0.05, "vit": 0.02, "lstm": 1.0, "wordlm": 0.2, "ctr": 0.3}
# The job's optimizer (train.py gives DDP and local the same): the
# click-through model's table has sparse gradients, for which torch has no
# momentum; AdaGrad with a per-row accumulator is the classic there.
OPTIMIZER = {"ctr": "adagrad"}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid):
    """utime + stime of one process, seconds (None once it is gone)."""
    try:
        stat = open("/proc/%d/stat" % pid).read()
    except OSError:
        return None
    f = stat[stat.rindex(")") + 2:].split()
    return (int(f[11]) + int(f[12])) / CLK_TCK


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def tail(path, n=15):
    try:
        return "\n".join(open(path, errors="replace").read().splitlines()[-n:])
    except OSError:
        return ""


class Run:
    """One (system, model, rate, round): its processes, logs and record."""

    def __init__(self, args, net, name, model, steps, rnd):
        self.args, self.net, self.name, self.model, self.steps = args, net, name, model, steps
        (self.kind, self.variant), self.opts = parse_system(name)
        self.build = args.base_build if "base" in self.opts else args.build
        self.workers = 1 if name.split("@")[0] in ONE_WORKER else args.workers
        self.nodes = worker_nodes(self.workers)
        self.shards = int(self.opts.get("shards", 2))
        self.dir = tempfile.mkdtemp(prefix="tta-%s-%s-" % (model, name))
        self.out = os.path.join(self.dir, "result.json")
        self.procs = {}   # label -> Popen
        self.rec = {"system": name, "model": model, "rate": net.rate, "round": rnd,
                    "steps_wanted": steps, "workers": self.workers, "status": "failed"}
        if self.kind == "gradstream":
            self.rec["shard_nodes"] = shard_nodes(self.shards)
        self.env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
                        PYTHONDONTWRITEBYTECODE="1",
                        PYTHONPATH=os.path.join(self.build, "python"))
        if args.blas_dir:
            self.env["LD_LIBRARY_PATH"] = args.blas_dir

    def spawn(self, label, node, argv, env=None):
        log = open(os.path.join(self.dir, label + ".log"), "w")
        p = subprocess.Popen(self.net.exec_argv(node, argv), stdout=log, stderr=subprocess.STDOUT,
                             cwd=REPO, env=dict(self.env, **(env or {})))
        self.procs[label] = p
        return p

    def wait_file(self, path, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if os.path.exists(path) and os.path.getsize(path) > 0:
                return open(path).read().strip()
            dead = [l for l, p in self.procs.items() if p.poll() is not None]
            if dead:
                raise RuntimeError("%s exited early:\n%s" % (dead[0], tail(os.path.join(
                    self.dir, dead[0] + ".log"))))
            time.sleep(0.05)
        raise TimeoutError("no %s within %ds" % (path, timeout))

    def script_argv(self, extra):
        a = self.args
        # A memory limit on every training process (RLIMIT_DATA: what it
        # allocates), as a worker machine's memory would be.
        limit = (["prlimit", "--data=%d" % (a.script_data_limit_mb << 20)]
                 if a.script_data_limit_mb else [])
        return (limit + [sys.executable, os.path.join(HERE, "train.py"), "--model", self.model,
                 "--steps", str(self.steps), "--eval_every", str(a.eval_every),
                 "--test_limit", str(a.test_limit), "--global_batch", str(a.global_batch),
                 "--seed", str(a.seed), "--lr", str(LR[self.model]), "--out", self.out,
                 "--ctr_rows", str(a.ctr_rows)] + extra)

    # -- the two kinds of job

    def start_ddp(self, port):
        master = "%s:%d" % (self.net.nodes["c"]["ip"], port)
        for rank, node in enumerate(self.nodes):
            hook = ["--ddp_hook", "fp32", "--ctr_sparse", "0"] if self.variant == "dense" else [
                "--ddp_hook", self.variant]
            self.spawn("rank%d" % rank, node, self.script_argv(
                ["--system", "ddp"] + hook + ["--rank", str(rank),
                 "--world", str(self.workers), "--master", master]),
                env={"GLOO_SOCKET_IFNAME": self.net.nodes[node]["dev"]})

    def start_local(self):
        batch = self.args.global_batch // (1 if self.variant == "full" else self.args.workers)
        self.spawn("rank0", "c", self.script_argv(
            ["--system", "local", "--global_batch", str(batch)]))

    def cli(self, *argv, timeout=30):
        r = subprocess.run(self.net.exec_argv("a", [os.path.join(self.build, "cli/gradstream"),
                                                    "--coordinator=" + self.coordinator] +
                                              list(argv)),
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError("gradstream %s: exit %d: %s" % (" ".join(argv), r.returncode,
                                                              r.stderr.strip()))
        return r.stdout

    def start_gradstream(self):
        b, n = self.build, self.net.nodes
        flags = (["--pull_answer_bytes=" + self.opts["answer"]] if "answer" in self.opts
                 else [])
        if "threads" in self.opts:
            flags.append("--executor_threads=" + self.opts["threads"])
        shards = []
        for i, node in enumerate(shard_nodes(self.shards)):
            pf = os.path.join(self.dir, "shard%d.port" % i)
            self.spawn("shard%d" % i, node, [os.path.join(b, "server/shard/gs_shard"),
                                             "--address=" + n[node]["ip"], "--port=0",
                                             "--port_file=" + pf, "--shard_index=%d" % i] +
                       flags)
            shards.append((n[node]["ip"], pf))
        shards = ["%s:%s" % (ip, self.wait_file(pf)) for ip, pf in shards]
        pf = os.path.join(self.dir, "coordinator.port")
        self.spawn("coordinator", "a", [os.path.join(b, "server/coordinator/gs_coordinator"),
                                        "--host=" + n["a"]["ip"], "--port=0",
                                        "--port_file=" + pf, "--start_grace=1s",
                                        "--shards=" + ",".join(shards)])
        self.coordinator = "%s:%s" % (n["a"]["ip"], self.wait_file(pf))
        env = {"GRADSTREAM_COORDINATOR": self.coordinator}
        if "buckets" in self.opts:  # the scripts are gs_worker's children
            env["GRADSTREAM_BUCKET_BYTES"] = self.opts["buckets"].replace(":", ",")
        if "prefetch" in self.opts:
            env["GRADSTREAM_ROW_PREFETCH"] = self.opts["prefetch"]
        for node in self.nodes:
            self.spawn("worker_" + node, node, [os.path.join(b, "worker/trainer/gs_worker"),
                                                "--device=cpu", "--name=tta-" + node],
                       env=env)
        deadline = time.time() + 60
        while len(json.loads(self.cli("cluster", "--json")).get("workers", [])) < self.workers:
            if time.time() > deadline:
                raise TimeoutError("the %d workers did not register within 60 s" % self.workers)
            time.sleep(0.3)
        script = " ".join(self.script_argv(["--system", "gradstream"] + (
            [] if self.workers == self.args.workers else
            ["--global_batch", str(self.args.global_batch // self.args.workers)]) +
            SCRIPT_FLAGS.get(self.name.split("@")[0], [])))
        if self.variant is None or isinstance(self.variant, list):
            codec = list(self.variant or [])
            if self.name.split("@")[0] == "gs-out32":
                if self.model not in OUTPUT_LAYER:
                    raise SystemExit("gs-out32: no output layer named for %s (OUTPUT_LAYER; "
                                     "wordlm's is tied to its embedding)" % self.model)
                out = OUTPUT_LAYER[self.model]
                codec.append("--codec_override=%s.weight=none,%s.bias=none" % (out, out))
        else:
            codec = ["--codec", self.variant, "--pull_codec", self.variant]
        self.job = json.loads(self.cli(
            "submit", "--json", "--name=tta-%s-%s" % (self.model, self.name),
            "--workers=%d" % self.workers,
            *([] if any(f.startswith("--consistency") for f in codec) else ["--consistency=sync"]),
            "--optimizer=" + OPTIMIZER.get(self.model, "momentum"),
            "--lr=%g" % LR[self.model], "--workdir", REPO, "--entrypoint", script,
            *codec))["job_id"]

    def job_status(self):
        return json.loads(self.cli("status", self.job, "--json"))

    # -- measuring

    def daemons(self):
        return {l: p.pid for l, p in self.procs.items() if not l.startswith("rank")}

    def sample(self):
        return {"t": time.time(), "net": self.net.counters(),
                "cpu": {l: proc_cpu_s(pid) for l, pid in self.daemons().items()}}

    def ended(self):
        if self.kind == "local":
            return self.procs["rank0"].poll() is not None
        if self.kind == "ddp":
            # A rank that failed leaves the other waiting in gloo: the run is over.
            codes = [self.procs["rank%d" % r].poll() for r in range(self.workers)]
            return all(c is not None for c in codes) or any(c not in (None, 0) for c in codes)
        st = self.job_status()
        state = st.get("state")
        # What the job ran with (the codec policy, as `gradstream status` shows it).
        self.rec.update(job_state=state, job_message=st.get("message"),
                        job_codec=st.get("spec", {}).get("codec"),
                        job_progress=st.get("progress"))
        # The precision controller's decisions ([owed descent], the error bound).
        decided = []
        for t in st.get("precision", []):
            for path in ("push", "pull"):
                for e in t.get(path, {}).get("events", []):
                    why = "warm-up over" if e.get("warmup") else "%s%.3g" % (
                        "owed " if e.get("owed") else "error " if e.get("raise") else "calm ",
                        e.get("ratio", 0))
                    decided.append("%s %s %s -> %s at clock %s (%s)" % (
                        t.get("tensor"), path, e.get("from"), e.get("to"), e.get("clock", 0), why))
        if decided:
            self.rec["precision_decisions"] = decided
        # Exact sends per tensor and path, and the level each path ended at.
        paths = {}
        for t in st.get("precision", []):
            for path in ("push", "pull"):
                p = t.get(path)
                if p:
                    paths["%s %s" % (t.get("tensor"), path)] = (
                        "%s, %s flushes, error %.3g clocks, %.3g of the tensor" % (
                            p.get("codec"), p.get("flushes", 0), p.get("ratio", 0),
                            p.get("relative", 0)))
        if paths:
            self.rec["precision_paths"] = paths
        # Each member's share of its steps spent waiting (WAIT in status),
        # as of its last report.
        shares = [m.get("wait_share", 0) for m in st.get("members", [])]
        if any(shares):
            self.rec["wait_share"] = shares
        return state in ("COMPLETED", "FAILED", "CANCELLED")

    def execute(self, port):
        start = time.time()
        deadline = start + self.args.deadline
        try:
            {"ddp": lambda: self.start_ddp(port), "local": self.start_local,
             "gradstream": self.start_gradstream}[self.kind]()
            first = last = None
            next_poll = 0.0
            while True:
                res = read_json(self.out)
                if first is None and res is not None:
                    first = self.sample()   # rank 0 evaluated step 0: the loop starts
                if last is None and res is not None and "steps" in res:
                    last = self.sample()    # rank 0 left the loop
                if time.time() >= next_poll:
                    next_poll = time.time() + 2.0
                    if self.ended():
                        break
                if time.time() > deadline:
                    self.rec["status"] = "timeout"
                    break
                time.sleep(0.1)
            self.collect(first, last)
        except (RuntimeError, TimeoutError, ValueError, subprocess.SubprocessError) as e:
            self.rec["error"] = str(e)
        finally:
            self.stop()
        self.rec["wall_s"] = time.time() - start
        if self.rec["status"] != "ok":
            self.rec["logs"] = {l: tail(os.path.join(self.dir, l + ".log"))
                                for l in self.procs}
        # The link choice's decisions ([link choice]), from every process's log.
        link = []
        for l in self.procs:
            try:
                with open(os.path.join(self.dir, l + ".log"), errors="replace") as f:
                    link += ["%s: %s" % (l, line.strip()[line.find("link choice"):])
                             for line in f if "link choice at clock" in line]
            except OSError:
                pass
        if link:
            self.rec["link_choice"] = link
        shutil.rmtree(self.dir, ignore_errors=True)   # what matters is in the record
        return self.rec

    def collect(self, first, last):
        res = read_json(self.out) or {}
        ranks = [res] + [read_json("%s.rank%d" % (self.out, r)) or {}
                         for r in (range(1, self.workers) if self.kind != "local" else ())]
        steps = res.get("steps") or len(res.get("step_s", []))
        self.rec.update(steps=steps, params=res.get("params"), evals=res.get("evals", []),
                        step_s=res.get("step_s", []), ps_stats=res.get("ps_stats"))
        # Rank 0's median forward, backward and update (ps.step or
        # opt.step) per step, ms, the first step left out as for step time.
        phases = res.get("phase_s") or {}
        self.rec["phase_ms"] = {p: 1000 * statistics.median(v[1:])
                                for p, v in phases.items() if len(v) > 1}
        if self.kind == "gradstream":  # each worker's own: their codecs' levels may differ
            self.rec["ps_stats_per_rank"] = [r.get("ps_stats") for r in ranks]
        if self.rec["status"] != "timeout":
            ok = "steps" in res and res["steps"] == self.steps and all("steps" in r for r in ranks)
            if self.kind == "gradstream":
                ok = ok and self.rec.get("job_state") == "COMPLETED"
            self.rec["status"] = "ok" if ok else "failed"
        n = max(1, len(res.get("step_s", [])))
        cpu = {"script%d" % i: r["cpu_s"] / r["steps"] for i, r in enumerate(ranks)
               if r.get("steps")}
        if first and last:
            for label, c0 in first["cpu"].items():
                c1 = last["cpu"].get(label)
                if c0 is not None and c1 is not None:
                    cpu[label] = (c1 - c0) / n
            self.rec["net_bytes_per_step"] = {
                node: (sum(last["net"][node]) - sum(first["net"][node])) / n
                for node in last["net"]}
            self.rec["loop_wall_s"] = last["t"] - first["t"]
        self.rec["cpu_s_per_step"] = cpu
        # Each script's resident memory at the end of its loop and its peak.
        self.rec["script_rss_mb"] = [[r.get("rss_mb"), r.get("max_rss_mb")] for r in ranks
                                     if r.get("steps")]
        if "best_auc" in res:
            self.rec["best_auc"] = res["best_auc"]
        # Each rank's own namespace over its loop: [tx, rx] per step.
        self.rec["script_tx_rx_per_step"] = [[r["net_tx"] / r["steps"], r["net_rx"] / r["steps"]]
                                             for r in ranks if r.get("steps")]

    def stop(self):
        if self.kind == "gradstream" and self.rec.get("job_state") not in (
                "COMPLETED", "FAILED", "CANCELLED") and hasattr(self, "job"):
            try:
                self.cli("cancel", self.job, timeout=10)
            except (RuntimeError, subprocess.SubprocessError):
                pass
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.time() + 10
        for p in self.procs.values():
            try:
                p.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.net.kill_all()   # the scripts gs_worker started, if any outlived it


def worker_nodes(n):
    """The namespaces of n training processes: c, d, e, ... (a and b hold
    the shards and the coordinator)."""
    return [chr(ord("c") + i) for i in range(n)]


def shard_nodes(n):
    """The namespaces of n shards: a (with the coordinator), b, then s2, s3, ..."""
    return ["a", "b"][:n] + ["s%d" % i for i in range(2, n)]


def rotated(names, k):
    k %= len(names)
    return names[k:] + names[:k]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="widecnn,resnet,lstm")
    ap.add_argument("--rates", default="1gbit,100mbit,none", help="tbf rates; none = unshaped")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rate_steps", default="",
                    help="steps at a given rate, e.g. 100mbit=60 (default: --steps)")
    ap.add_argument("--eval_every", type=int, default=25)
    ap.add_argument("--test_limit", type=int, default=10000)
    ap.add_argument("--global_batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2,
                    help="training processes (DDP ranks, gradstream workers), each in its own "
                         "namespace; the global batch is split among them")
    ap.add_argument("--ctr_rows", type=int, default=1 << 20, help="ctr: the table's rows")
    ap.add_argument("--script_data_limit_mb", type=int, default=0,
                    help="RLIMIT_DATA of every training script (prlimit --data), MiB; 0 = none")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--deadline", type=float, default=900, help="seconds per run")
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--base_build", default="",
                    help="the build the systems NAME@base run (gradstream binaries and package)")
    ap.add_argument("--blas_dir", default="",
                    help="LD_LIBRARY_PATH for the scripts, e.g. "
                         "/usr/lib/x86_64-linux-gnu/openblas-pthread (see the README)")
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    ap.add_argument("--name", default="", help="file name stem of the results (default: UTC time)")
    ap.add_argument("--report", nargs="+", metavar="JSON",
                    help="only write the table and PNGs from these result files")
    args = ap.parse_args()
    if args.report:
        runs = []
        for i, f in enumerate(args.report):
            for r in json.load(open(f))["runs"]:
                r["invocation"] = i   # rounds pair only within one invocation
                runs.append(r)
        stem = (os.path.join(args.results, args.name) if args.name else
                os.path.splitext(args.report[0])[0])
        report.write(runs, stem)
        return 0
    # One line saying what is missing when this machine cannot build the network.
    check = subprocess.run([os.path.join(REPO, "scripts", "netns_check.sh")],
                           capture_output=True, text=True, timeout=120)
    if check.returncode != 0:
        print("run.py needs network namespaces: %s" % (check.stdout + check.stderr).strip(),
              file=sys.stderr)
        return 2
    args.build = os.path.abspath(args.build)
    systems = args.systems.split(",")
    unknown = []
    for s in systems:
        try:
            parse_system(s)
        except KeyError:
            unknown.append(s)
    if unknown:
        print("unknown systems %s (want %s, gradstream ones with @base, @buckets=F:R, "
              "@answer=N, @prefetch=0, @shards=N, @threads=N)" % (unknown, ",".join(SYSTEMS)),
              file=sys.stderr)
        return 2
    max_shards = max(int(parse_system(s)[1].get("shards", 2)) for s in systems)
    builds = [args.build]
    if any("@base" in s for s in systems):
        if not args.base_build:
            print("a system @base needs --base_build", file=sys.stderr)
            return 2
        args.base_build = os.path.abspath(args.base_build)
        builds.append(args.base_build)
    for build in builds:
        for rel in ("server/shard/gs_shard", "server/coordinator/gs_coordinator",
                    "worker/trainer/gs_worker", "cli/gradstream", "python/gradstream/_lib.py"):
            if not os.path.exists(os.path.join(build, rel)):
                print("missing %s in %s: cmake --build %s --target gs_shard gs_coordinator "
                      "gs_worker gradstream gs_python" % (rel, build, build), file=sys.stderr)
                return 2
    blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    if not args.blas_dir and "/blas/" in blas:
        print("note: torch will use the reference BLAS (%s), which makes the wide layers' "
              "compute ~40x slower; see the README's --blas_dir" % blas, file=sys.stderr)
    rate_steps = dict(kv.split("=") for kv in args.rate_steps.split(",") if kv)
    os.makedirs(args.results, exist_ok=True)
    stem = os.path.join(args.results, args.name or time.strftime("%Y%m%d-%H%M%S", time.gmtime()))
    out = {"command": " ".join(sys.argv), "started": time.strftime("%FT%TZ", time.gmtime()),
           "host_cpus": os.cpu_count(), "blas_dir": args.blas_dir, "runs": []}
    # SIGTERM ends the runs as Ctrl-C does: through the finally blocks.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    port = 29500
    try:
        for rnd in range(1, args.rounds + 1):
            for rate in args.rates.split(","):
                with Network(shard_nodes(max_shards) + worker_nodes(args.workers), rate) as net:
                    for model in args.models.split(","):
                        steps = int(rate_steps.get(rate, args.steps))
                        for name in rotated(systems, rnd - 1):
                            port += 1
                            print("round %d, %s, %s, %s: %d steps" % (rnd, rate, model, name,
                                                                     steps), flush=True)
                            rec = Run(args, net, name, model, steps, rnd).execute(port)
                            out["runs"].append(rec)
                            print("  " + report.one_line(rec), flush=True)
                            with open(stem + ".json", "w") as f:
                                json.dump(out, f, indent=1)
    except KeyboardInterrupt:
        print("interrupted: the runs so far are in %s.json" % stem, file=sys.stderr)
    report.write(out["runs"], stem)
    print("results: %s.json, %s.md, %s-<model>.png" % (stem, stem, stem))
    return 0


if __name__ == "__main__":
    sys.exit(main())
