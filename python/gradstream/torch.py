"""PyTorch client of gradstream: train your own model on the parameter server.

    import gradstream.torch as gs
    gs.init()                          # the launcher's environment, or local mode
    ps = gs.ParameterServer(model)     # declares the tensors; rank 0 initializes the shards
    for x, y in gs.shard((images, labels), global_batch_size=64, steps=1000):
        loss = F.cross_entropy(model(x), y)
        loss.backward()                # each gradient is pushed as backward produces it
        ps.step(loss)                  # clock + 1, pull at the version the consistency mode allows

Under `gradstream submit --entrypoint "python3 train.py"` every worker runs
the script with GRADSTREAM_AGENT set (gs_worker's agent, see
worker/trainer/script_runner.h): the optimizer runs on the shards, with the
job's codec and consistency mode. Run as a plain script (no GRADSTREAM_AGENT)
the same code trains single-process: ParameterServer applies the optimizer
locally with torch.optim (the formulas the shards use), rank 0 of 1.

Rules: parameters are float32 (anything else is a TypeError naming the
tensor); one backward per step; rank and world size change only at clock
boundaries (gs.membership()); a worker scaled down leaves after its last
clock and the process exits with status 0 (SystemExit from step()).

Gradients cross to the C++ client by pointer (tensor.data_ptr()): a CPU
gradient is encoded where it lies, no copy. A CUDA gradient is copied to
host memory first and encoded on the CPU (encode path "host"): the
device-encode path of gs_worker's built-in models (the codec library's CUDA
kernels, only codes cross PCIe) is not wired to the package yet.

NOTE: [buffers] Only parameters live on the shards. A model's buffers
(model.named_buffers(): BatchNorm's running_mean and running_var, and
anything a module registers with register_buffer) are neither declared,
pushed nor pulled: in a job each worker keeps its own, updated from its own
share of the data, and a worker that joins mid-job starts from its freshly
built module's values (BatchNorm: mean 0, variance 1), and after a
scale-down rank 0 may be such a worker. Training in train() mode never reads
them; eval() mode does. What to do: evaluate where the buffers have seen
data for a while (rank 0 from the start, as the examples do), or, before
an evaluation that must not depend on which worker makes it, recompute
them from the current parameters: set each BatchNorm's momentum to None
(a cumulative average), reset_running_stats(), run a few training batches
forward under torch.no_grad() in train() mode, then eval(). In a job
ParameterServer warns once when the model has floating-point buffers;
silence it with warnings.filterwarnings("ignore", category=gs.BufferWarning).
Integer buffers (num_batches_tracked) are counters and pass silently.
"""

import atexit
import ctypes
import json
import math
import os
import sys
import time
import warnings

import torch

from gradstream import _lib

DEFAULT_TIMEOUT_S = 600.0   # waits for the shard map / the other ranks
PUSH_TIMEOUT_MS = 60_000

_state = None  # the process's _Session (init)


class Membership:
    """This worker's place in the job, as it holds from the current clock on."""

    def __init__(self, rank, world_size, epoch, worker_id, job_id, distributed):
        self.rank = rank
        self.world_size = world_size
        self.epoch = epoch
        self.worker_id = worker_id
        self.job_id = job_id
        self.distributed = distributed

    def __repr__(self):
        return ("Membership(rank=%d, world_size=%d, epoch=%d, worker_id=%d, job_id=%r)" %
                (self.rank, self.world_size, self.epoch, self.worker_id, self.job_id))


class _Session:
    def __init__(self, agent, timeout):
        self.lib = None
        self.handle = None
        self.distributed = agent is not None
        self.job_id = os.environ.get("GRADSTREAM_JOB_ID", "")
        self.current = Membership(0, 1, 0, 0, self.job_id, self.distributed)
        self.clock = 0
        self.samples = 0           # yielded by shard(), for samples/s
        self.ps = None
        if self.distributed:
            self.lib = _lib.load()
            self.handle = self.lib.gs_open(agent.encode(), int(timeout * 1000))
            if not self.handle:
                raise _lib.GradstreamError(-1, self.lib.gs_last_error().decode())
            self.adopt(force=True, at_clock=False)  # no clock yet: the newest

    def latest(self):
        m = _lib.Membership()
        _lib.check(self.lib, self.lib.gs_membership_get(self.handle, ctypes.byref(m)))
        return m

    def adopt(self, force=False, at_clock=True):
        """Takes the membership in effect at the current clock (the job's
        epochs say which; an epoch takes effect at its clock boundary)."""
        if not self.distributed:
            return
        m = self.latest()
        if at_clock:
            here = _lib.Membership()
            _lib.check(self.lib, self.lib.gs_membership_at(self.handle, self.clock,
                                                           ctypes.byref(here)))
            if here.active:
                m = here
        if force or m.epoch != self.current.epoch:
            self.current = Membership(m.rank, m.world_size, m.epoch, m.worker_id, self.job_id,
                                      True)

    def job_spec_text(self):
        need = ctypes.c_int64(0)
        buf = ctypes.create_string_buffer(1 << 16)
        _lib.check(self.lib, self.lib.gs_job_spec(self.handle, buf, len(buf), ctypes.byref(need)))
        if need.value >= len(buf):
            buf = ctypes.create_string_buffer(need.value + 1)
            _lib.check(self.lib, self.lib.gs_job_spec(self.handle, buf, len(buf),
                                                      ctypes.byref(need)))
        return buf.value.decode()


def init(timeout=DEFAULT_TIMEOUT_S):
    """Joins the job this process was started for (GRADSTREAM_AGENT, set by
    gs_worker), or runs single-process when there is none. Idempotent."""
    global _state
    if _state is None:
        _state = _Session(os.environ.get("GRADSTREAM_AGENT") or None, timeout)
    return membership()


def _session():
    if _state is None:
        raise RuntimeError("gradstream: call gradstream.torch.init() first")
    return _state


def membership():
    """The current Membership (rank, world_size, epoch, ...)."""
    return _session().current


def rank():
    return membership().rank


def world_size():
    return membership().world_size


def is_distributed():
    return _session().distributed


class BufferWarning(UserWarning):
    """The model has floating-point buffers the job does not synchronize
    (see [buffers])."""


def unsynced_buffers(model):
    """Names of the model's floating-point buffers: what a job leaves to each
    worker (see [buffers])."""
    return [n for n, b in model.named_buffers() if b is not None and b.is_floating_point()]


def _warn_unsynced_buffers(model):
    names = unsynced_buffers(model)
    if names:
        shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
        warnings.warn("gradstream: the model has %d floating-point buffers (%s) that the job "
                      "does not synchronize: each worker keeps its own (BatchNorm running "
                      "statistics, for one); see [buffers] in gradstream/torch.py"
                      % (len(names), shown), BufferWarning, stacklevel=3)


# The shards' optimizers as torch.optim (common/optim: the same formulas), for
# local mode and for checking an update against the shards'.
def local_optimizer(params, optimizer="momentum", lr=0.05, momentum=0.9, epsilon=None,
                    initial_accumulator=0.1, beta1=0.9, beta2=0.999, weight_decay=0.0):
    params = list(params)
    if optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)
    if optimizer in ("momentum", "nesterov"):
        return torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=optimizer == "nesterov",
                               weight_decay=weight_decay)
    if optimizer == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, initial_accumulator_value=initial_accumulator,
                                   eps=1e-7 if epsilon is None else epsilon,
                                   weight_decay=weight_decay)
    if optimizer == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(beta1, beta2),
                                eps=1e-8 if epsilon is None else epsilon,
                                weight_decay=weight_decay)
    raise ValueError("gradstream: unknown optimizer %r (want sgd|momentum|nesterov|adagrad|adam)"
                     % optimizer)


class ParameterServer:
    """The model's parameters on the shards.

    Declares every parameter that requires a gradient (name and shape, in
    model.named_parameters() order). Rank 0's declaration becomes the job's
    tensor list; another rank's must equal it. Rank 0 of a job at clock 0
    sends the initial values; every rank then pulls the current parameters
    into the model, in place.

    The optimizer arguments (see local_optimizer) apply in local mode only;
    in a job the shards apply the job's optimizer (`gradstream submit
    --optimizer ... --lr ...`).
    """

    def __init__(self, model, timeout=DEFAULT_TIMEOUT_S, **optimizer):
        s = _session()
        if s.ps is not None:
            raise RuntimeError("gradstream: one ParameterServer per process")
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not named:
            raise ValueError("gradstream: the model has no parameter that requires a gradient")
        for n, p in named:
            if p.dtype != torch.float32:
                raise TypeError("gradstream: parameter %r is %s; only torch.float32 parameters "
                                "are supported (call model.float())" % (n, p.dtype))
        self._names = [n for n, _ in named]
        self._params = [p for _, p in named]
        self._session = s
        self._loss = None
        self._accuracy = (0.0, 0)
        self._rate_start = time.monotonic()
        self._rate_samples = 0
        self._rate = 0.0
        # Where gradients are encoded (`gradstream status` shows it): "host",
        # or "host-from-cuda" when CUDA gradients are copied to host memory
        # and encoded on the CPU (the device-encode path is not wired yet).
        self.encode_path = "host-from-cuda" if any(p.is_cuda for p in self._params) else "host"
        s.ps = self
        if not s.distributed:
            self._local = local_optimizer(self._params, **optimizer)
            return
        self._local = None
        _warn_unsynced_buffers(model)
        lib = s.lib
        n = len(self._params)
        names = (ctypes.c_char_p * n)(*[x.encode() for x in self._names])
        ndims = (ctypes.c_int32 * n)(*[p.dim() for p in self._params])
        flat = [d for p in self._params for d in p.shape]
        dims = (ctypes.c_int64 * max(1, len(flat)))(*flat)
        _lib.check(lib, lib.gs_declare(s.handle, n, names, ndims, dims, int(timeout * 1000)))
        _lib.check(lib, lib.gs_set_encode_path(s.handle, self.encode_path.encode()))
        s.clock = s.latest().join_clock
        s.adopt(force=True)
        # Host staging only where a parameter is not a contiguous CPU tensor.
        self._staging = [None if (not p.is_cuda and p.is_contiguous()) else
                         torch.empty(p.shape, dtype=torch.float32,
                                     pin_memory=p.is_cuda and torch.cuda.is_available())
                         for p in self._params]
        self._zeros = [None] * n
        self._pushed = [False] * n
        if s.clock == 0 and s.current.rank == 0:
            hosts = [p.detach().cpu().contiguous() for p in self._params]
            ptrs = (ctypes.c_void_p * n)(*[h.data_ptr() for h in hosts])
            _lib.check(lib, lib.gs_init_params(s.handle, ptrs, PUSH_TIMEOUT_MS))
        self._pull(int(timeout * 1000))
        for i, p in enumerate(self._params):
            p.register_hook(self._make_hook(i))
        self._left = False
        atexit.register(self._finish)
        s.lib.gs_sync(s.handle, s.clock, 0.0, 0.0, 0, 0.0, 1)

    def _finish(self):
        """At exit: the last report, then Leave (the shards close the streams)."""
        if self._left:
            return
        self._left = True
        s = self._session
        try:
            self._report()
        except _lib.GradstreamError:
            pass
        s.lib.gs_leave(s.handle, 10_000)

    # -- data path

    def _make_hook(self, i):
        def hook(grad):
            self._push(i, grad)
            return grad
        return hook

    def _push(self, i, grad):
        s = self._session
        if self._pushed[i]:
            raise RuntimeError("gradstream: a second gradient for %r in clock %d: call "
                               "ps.step() after each backward()" % (self._names[i], s.clock))
        g = grad.detach()
        if g.dtype != torch.float32:
            raise TypeError("gradstream: gradient of %r is %s, want torch.float32" %
                            (self._names[i], g.dtype))
        if tuple(g.shape) != tuple(self._params[i].shape):
            raise ValueError("gradstream: gradient of %r has shape %s, the parameter %s" %
                             (self._names[i], tuple(g.shape), tuple(self._params[i].shape)))
        if g.is_cuda:
            g = g.to("cpu")
        g = g.contiguous()
        _lib.check(s.lib, s.lib.gs_push(s.handle, i, g.data_ptr(), g.numel(), s.clock))
        self._pushed[i] = True

    def _pull(self, timeout_ms):
        s = self._session
        ptrs = (ctypes.c_void_p * len(self._params))(
            *[(st if st is not None else p.data).data_ptr()
              for p, st in zip(self._params, self._staging)])
        rc = s.lib.gs_pull(s.handle, s.clock, ptrs, timeout_ms)
        if rc == _lib.CANCELLED:
            self._exit("the job ended")
        _lib.check(s.lib, rc)
        with torch.no_grad():
            for p, st in zip(self._params, self._staging):
                if st is not None:
                    p.data.copy_(st, non_blocking=False)

    def _exit(self, why):
        self._left = True  # nothing left to tell the shards
        print("gradstream: %s; exiting" % why, file=sys.stderr)
        raise SystemExit(0)

    # -- the training step

    def step(self, loss=None):
        """Ends this worker's clock: pushes what backward has not (zeros for a
        parameter without a gradient), waits for the shards to take every
        push, advances the clock, reports progress and pulls the parameters
        at the new clock. Clears the parameters' .grad."""
        s = self._session
        if loss is not None:
            v = float(loss.detach()) if torch.is_tensor(loss) else float(loss)
            self._loss = v if self._loss is None else 0.9 * self._loss + 0.1 * v
        if self._local is not None:
            self._local.step()
            self._local.zero_grad(set_to_none=True)
            s.clock += 1
            return
        for p in self._params:
            p.grad = None
        for i, pushed in enumerate(self._pushed):
            if not pushed:
                if self._zeros[i] is None:
                    self._zeros[i] = torch.zeros(self._params[i].shape, dtype=torch.float32)
                self._push(i, self._zeros[i])
        _lib.check(s.lib, s.lib.gs_wait_pushes(s.handle, PUSH_TIMEOUT_MS))
        self._pushed = [False] * len(self._params)
        s.clock += 1
        _lib.check(s.lib, s.lib.gs_advance_clock(s.handle, s.clock))
        self._report()
        m = s.latest()
        if not m.active:
            self._exit("the job ended")
        if m.leave and s.clock >= m.leave_clock:
            self._left = True
            _lib.check(s.lib, s.lib.gs_leave(s.handle, PUSH_TIMEOUT_MS))
            s.lib.gs_sync(s.handle, s.clock, self._loss or 0.0, 0.0, 0, 0.0, 2)
            self._exit("scaled down: left the job after clock %d" % s.clock)
        s.adopt()
        self._pull(int(DEFAULT_TIMEOUT_S * 1000))

    def report(self, accuracy):
        """Reports a test-set accuracy (0..1) measured at the current clock."""
        self._accuracy = (float(accuracy), max(1, self._session.clock))
        if self._local is None:
            self._report()

    def _report(self):
        s = self._session
        now = time.monotonic()
        if now - self._rate_start >= 1.0:
            self._rate = (s.samples - self._rate_samples) / (now - self._rate_start)
            self._rate_start, self._rate_samples = now, s.samples
        acc, acc_clock = self._accuracy
        _lib.check(s.lib, s.lib.gs_sync(s.handle, s.clock, self._loss or 0.0, acc, acc_clock,
                                        self._rate, 1))

    @property
    def clock(self):
        return self._session.clock

    def stats(self):
        """Bytes pushed (encoded and as fp32) since init; zeros in local mode."""
        s = self._session
        out = _lib.Stats()
        if s.distributed:
            _lib.check(s.lib, s.lib.gs_stats_get(s.handle, ctypes.byref(out)))
        return {f: getattr(out, f) for f, _ in _lib.Stats._fields_}

    def job_spec(self):
        """The job's spec (proto text format); "" in local mode."""
        return self._session.job_spec_text() if self._session.distributed else ""


# -- data sharding

def _indexable(dataset):
    if isinstance(dataset, (tuple, list)) and dataset and all(torch.is_tensor(t) for t in dataset):
        n = len(dataset[0])
        return n, lambda idx: tuple(t[idx] for t in dataset)
    n = len(dataset)
    collate = getattr(torch.utils.data, "default_collate", None)
    if collate is None:
        from torch.utils.data._utils.collate import default_collate as collate
    return n, lambda idx: collate([dataset[int(i)] for i in idx])


def _permutation(n, seed, epoch, pass_no, shuffle):
    if not shuffle:
        return torch.arange(n)
    # A job's first membership epoch is 1, single-process's 0: the same
    # permutations, so a job draws what the script draws single-process.
    g = torch.Generator()
    g.manual_seed((seed * 1_000_003 + max(0, epoch - 1) * 7919 + pass_no) % (2 ** 63))
    return torch.randperm(n, generator=g)


def _split(perm, rank, world_size, batch_size=None, global_batch_size=None):
    """One pass over `perm` as this rank's batches.

    Per-worker batches: perm is padded with its first indices to a multiple
    of world_size (as torch's DistributedSampler does), rank r takes
    perm[r::world_size], cut into batch_size pieces.

    Global batches: perm is cut into ceil(len / global_batch_size) global
    batches and rank r takes every world_size-th index of each, so a clock
    consumes the same samples whatever the world size and every rank makes
    the same number of clocks per pass. A last batch smaller than
    world_size is padded with the pass's first indices, so that every rank
    has a piece."""
    if global_batch_size is None:
        total = math.ceil(len(perm) / world_size) * world_size
        mine = torch.cat([perm, perm[: total - len(perm)]])[rank::world_size]
        return [mine[i:i + batch_size] for i in range(0, len(mine), batch_size)]
    if global_batch_size < world_size:
        raise ValueError("gradstream: global_batch_size %d is smaller than the world size %d"
                         % (global_batch_size, world_size))
    out = []
    for start in range(0, len(perm), global_batch_size):
        batch = perm[start:start + global_batch_size]
        if len(batch) < world_size:
            batch = torch.cat([batch, perm[: world_size - len(batch)]])
        out.append(batch[rank::world_size])
    return out


_passes = {}  # membership epoch -> passes started in it


def shard(dataset, batch_size=None, steps=None, shuffle=True, seed=0, global_batch_size=None):
    """Yields this worker's batches of `dataset` under the current membership.

    `dataset`: a tuple of tensors of equal length (features, labels, ...) or
    any map-style dataset. Give either `batch_size` (per worker, as with
    Horovod or DDP: a clock consumes batch_size * world_size samples; 32 when
    neither is given) or `global_batch_size` (split across the current
    members: a clock consumes global_batch_size samples whatever the world
    size, rank r taking every world_size-th of them, so a job takes the same
    optimizer steps on the same samples as the script run single-process,
    and scaling mid-job changes neither the batch nor what the learning rate
    means). The shards average the members' gradients; with a split that is
    not even (64 over 3: 22, 21, 21) the average weighs samples very slightly
    unevenly.

    One pass splits a permutation of the dataset over the members (see
    _split for how it is padded when it does not divide evenly), so the
    members' shares are disjoint and cover the dataset. The permutation depends on (seed, the clock the pass starts
    at), so every member draws the same one, and a job draws the same as
    the script single-process until the membership changes. When it changes
    (at a clock boundary), the pass restarts with the new members' shares.
    With `steps`, passes repeat until the job's clock reaches `steps`;
    without, it is one pass.
    """
    if batch_size is not None and global_batch_size is not None:
        raise ValueError("gradstream: give batch_size (per worker) or global_batch_size, "
                         "not both")
    if batch_size is None and global_batch_size is None:
        batch_size = 32
    s = _session()
    n, take = _indexable(dataset)
    log = os.environ.get("GRADSTREAM_SHARE_LOG")
    while True:
        m = s.current
        pass_no = _passes.get(m.epoch, 0)
        _passes[m.epoch] = pass_no + 1
        perm = _permutation(n, seed, m.epoch, pass_no, shuffle)
        batches = _split(perm, m.rank, m.world_size, batch_size, global_batch_size)
        if log:
            with open(log, "a") as f:
                f.write(json.dumps({"worker": m.worker_id, "epoch": m.epoch, "pass": pass_no,
                                    "rank": m.rank, "world_size": m.world_size, "clock": s.clock,
                                    "batches": [len(b) for b in batches],
                                    "indices": torch.cat(batches).tolist()}) + "\n")
        changed = False
        for idx in batches:
            if steps is not None and s.clock >= steps:
                return
            if s.current.epoch != m.epoch:
                changed = True
                break
            s.samples += len(idx)
            yield take(idx)
        if changed:
            continue
        if steps is None or s.clock >= steps:
            return
