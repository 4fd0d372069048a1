"""The ParameterServer: the model's parameters on the shards, and the
training step over libgradstream_c's step loop (worker/client/step_loop.h,
the loop the built-in trainer runs too: see [step loop] there).

One step of clock c: backward hands each gradient from its hook to the
library's encode thread, by pointer, no copy, and goes on (see [push
path]); ps.step() ends the clock in C++ -- zeros for the tensors backward
did not reach, the pull of clock c + 1 asked for at once, the clock
advanced -- and returns once the clock's pushes are acknowledged, without
waiting for the pull; the
progress report goes out on the session's reporter thread. The next
forward waits per module for the parameters that module's forward reads
(gs_wait_tensors), so the first layers compute while the rest of the pull
is still on the wire (ByteScheduler's priority, see [layer-wise wait]).

NOTE: [layer-wise wait] After ps.step() the pull writes the parameters in
place until each is waited for. Each module's forward waits for the
parameters its forward reads -- measured on its first forward in each mode,
not taken from what it owns (_wait_plan.py; docs/design/layer-wise-wait.md)
-- and when the model's forward returns every parameter is in place. Code
that reads parameters outside the model's forward before calling it calls
ps.synchronize() first; model.state_dict() does that itself.

NOTE: [push path] The hook passes the gradient's memory to gs_push and
returns: encoding, the residual update and sending run on the library's
encode thread while backward goes on ([encode thread] in
worker/client/step_loop.h). Until ps.step() has ended the clock the memory
is read there, so the hook keeps a detached alias of the gradient (the same
storage; holding the gradient object itself would make autograd copy it
into .grad instead of moving it). Changing p.grad in place before
ps.step() (clip_grad_norm_, say) would race with the encode, and it never
changed what was pushed: ps.step() raises instead.

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

NOTE: [row prefetch] A table's forward needs its rows before anything else
in the model can run, so a pull asked by the forward puts a round trip and
the rows' transfer on the critical path. When the ids a gs.Embedding reads
are a tensor of the batch gs.shard yielded (the batch's tensor itself or a
copy, as model(ids) passes it), the table remembers which one (ids the
model computes from the batch, e.g. hashed, the table's ids_of computes
from the next batch instead); gs.shard
then takes each batch one ahead, and ps.step() asks for the next batch's
rows at the next clock in the requests of the next clock's dense pull
(gs_end_clock_rows; on their own when those cannot carry them, e.g. over
4 MiB): no message of their own, and the shard answers them when the
round closes, with the dense chunks. The next training
forward uses the prefetched rows when it reads exactly those ids at that
clock and pulls itself otherwise (ids computed from the batch without
ids_of, the first batch of a pass, a membership change); an evaluation in
between pulls its
own rows and leaves the prefetch in place. Either way the rows are those
of the same reader clock: in a sync job exactly what a pull by the forward
returns; under bounded staleness or async they may miss updates that
arrived between the ask and the forward, as any pull may, within the same
bound. A worker holds at most one prefetched batch per table.
GRADSTREAM_ROW_PREFETCH=0 in the script's environment turns it off, for
measuring it (bench/tta).
"""

import atexit
import ctypes
import sys
import time
import warnings

import torch

from gradstream import _lib
from gradstream._wait_plan import WaitPlan
from gradstream.embedding import (PULL_TIMEOUT_MS, ROW_BUDGET_SHARE, RowPull, memory_limit,
                                  push_rows, size_text, tables_of, unique_ids)
from gradstream.local import local_optimizer
from gradstream.session import DEFAULT_TIMEOUT_S, _session

PUSH_TIMEOUT_MS = 60_000


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
                      "statistics, for one); see [buffers] in gradstream/parameter_server.py"
                      % (len(names), shown), BufferWarning, stacklevel=3)


def _row_bytes(rows, dim, grad):
    """What `rows` fp32 rows of width `dim` take on the worker, with their
    gradients when `grad` (the row budget's unit)."""
    return rows * dim * 4 * (2 if grad else 1)


class ParameterServer:
    """The model's parameters on the shards.

    Declares every parameter that requires a gradient (name and shape, in
    model.named_parameters() order). Rank 0's declaration becomes the job's
    tensor list; another rank's must equal it. Rank 0 of a job at clock 0
    sends the initial values; every rank then pulls the current parameters
    into the model, in place.

    The model's gs.Embedding tables are declared after the parameters, as
    row-sparse tables that live on the shards (gradstream/embedding.py).
    The rows a clock's forwards read, with their gradients, may take at
    most `row_budget` bytes on the worker (default: a quarter of the memory
    the process may use, see memory_limit()); a forward past it raises
    MemoryError with the figures before it asks for anything.

    The optimizer arguments (see local_optimizer) apply in local mode only;
    in a job the shards apply the job's optimizer (`gradstream submit
    --optimizer ... --lr ...`).
    """

    def __init__(self, model, timeout=DEFAULT_TIMEOUT_S, row_budget=None, **optimizer):
        s = _session()
        if s.ps is not None:
            raise RuntimeError("gradstream: one ParameterServer per process")
        self._tables = tables_of(model)
        self._row_pull_s = 0.0  # waited in table forwards for rows (stats())
        self._prefetch_used = 0    # row prefetches a forward took (stats())
        self._prefetch_unused = 0  # and those dropped unread
        self._prefetch_fused = 0   # ... asked in the requests of the clock's pull
        self._set_row_budget(row_budget)
        if not s.distributed:
            for t in self._tables:
                t._materialize_local()  # a dense parameter, trained below
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not named and not self._tables:
            raise ValueError("gradstream: the model has no parameter that requires a gradient")
        for n, p in named:
            if p.dtype != torch.float32:
                raise TypeError("gradstream: parameter %r is %s; only torch.float32 parameters "
                                "are supported (call model.float())" % (n, p.dtype))
        self._names = [n for n, _ in named]
        self._params = [p for _, p in named]
        self._session = s
        self._accuracy = (0.0, 0)
        self._samples_seen = s.samples  # samples/s and the loss average are the library's
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
        # Tables after the parameters: tensor n + k is table k.
        table_names = [(name + ".table") if name else "table"
                       for name, m in model.named_modules() if any(m is t for t in self._tables)]
        total = n + len(self._tables)
        names = (ctypes.c_char_p * total)(*[x.encode() for x in self._names + table_names])
        ndims = (ctypes.c_int32 * total)(*([p.dim() for p in self._params] +
                                          [2] * len(self._tables)))
        flat = [d for p in self._params for d in p.shape]
        for t in self._tables:
            flat += [t.num_embeddings, t.embedding_dim]
        dims = (ctypes.c_int64 * max(1, len(flat)))(*flat)
        table_std = (ctypes.c_float * total)(*([-1.0] * n + [t.init_std for t in self._tables]))
        _lib.check(lib, lib.gs_declare(s.handle, total, names, ndims, dims, table_std,
                                       int(timeout * 1000)))
        for k, t in enumerate(self._tables):
            t._attach(self, n + k, table_names[k])
        _lib.check(lib, lib.gs_set_encode_path(s.handle, self.encode_path.encode()))
        s.clock = s.latest().join_clock
        s.adopt(force=True)
        # Host staging only where a parameter is not a contiguous CPU tensor.
        self._staging = [None if (not p.is_cuda and p.is_contiguous()) else
                         torch.empty(p.shape, dtype=torch.float32,
                                     pin_memory=p.is_cuda and torch.cuda.is_available())
                         for p in self._params]
        self._pushed = [False] * n
        self._shapes = [p.shape for p in self._params]
        self._held = [None] * n  # (gradient, its version) being encoded (see [push path])
        self._ready = [True] * n  # in place since the last ps.step()
        self._unready = 0
        self._left = False
        if s.clock == 0:
            # Only rank 0's values reach the shards (the library decides:
            # each rank built its model under its own seed).
            hosts = [p.detach().cpu().contiguous() for p in self._params]
            ptrs = (ctypes.c_void_p * total)(*([h.data_ptr() for h in hosts] +
                                               [None] * len(self._tables)))
            _lib.check(lib, lib.gs_init_params(s.handle, ptrs, PUSH_TIMEOUT_MS))
        self._call(lib.gs_pull(s.handle, s.clock, self._targets()))
        self._copy_staged(range(n))
        for i, p in enumerate(self._params):
            p.register_hook(self._make_hook(i))
        self._wait_plan = WaitPlan(model, self._params, self._wait, lambda: self._unready > 0)
        # What runs after the model's forward (a loss term over the
        # parameters, say) sees every parameter in place.
        model.register_forward_hook(lambda *args: self.synchronize())
        # state_dict() holds the parameters themselves: it returns once the
        # pull in flight is in place (see [layer-wise wait]).
        model._register_state_dict_hook(lambda *args: self.synchronize())
        atexit.register(self._finish)
        self._call(lib.gs_sync(s.handle, s.clock, 0.0, 0, 1))

    def _finish(self):
        """At exit: the last report, then Leave (the shards close the streams)."""
        if self._left:
            return
        self._left = True
        s = self._session
        if not s.handle:
            return
        s.lib.gs_abandon_pull(s.handle)
        for t in self._tables:
            self._drop_prefetch(t)
        self._report(wait=True, check=False)
        s.lib.gs_leave(s.handle, 10_000)

    # -- data path

    def _targets(self):
        """Where a pull writes: each parameter's memory, or its staging
        (nothing for a table: its rows move by _rows_for)."""
        return (ctypes.c_void_p * (len(self._params) + len(self._tables)))(
            *([(st if st is not None else p.data).data_ptr()
               for p, st in zip(self._params, self._staging)] + [None] * len(self._tables)))

    def _feed_position(self, ids):
        """Which tensor of the batch gs.shard yielded this clock `ids` is (the
        tensor itself or a copy of it), or None: see [row prefetch]."""
        feed = self._session.feed
        if (feed is None or feed.clock != self._session.clock or
                not isinstance(feed.batch, (tuple, list))):
            return None
        for j, t in enumerate(feed.batch):
            if t is ids:
                return j
        for j, t in enumerate(feed.batch):
            if (torch.is_tensor(t) and t.shape == ids.shape and t.dtype == ids.dtype and
                    torch.equal(t, ids.to(t.device))):
                return j
        return None

    def _set_row_budget(self, row_budget):
        """The bytes of rows (and their gradients) a clock's table forwards
        may hold on this worker: `row_budget`, or ROW_BUDGET_SHARE of the
        memory the process may use."""
        if row_budget is not None:
            if row_budget <= 0:
                raise ValueError("gradstream: row_budget is %r bytes, want > 0" % (row_budget,))
            self._row_budget, self._row_budget_why = int(row_budget), "row_budget="
            return
        limit, what = memory_limit()
        if limit is None:
            self._row_budget, self._row_budget_why = None, ""
        else:
            self._row_budget = int(limit * ROW_BUDGET_SHARE)
            self._row_budget_why = "%d%% of %s, %s" % (ROW_BUDGET_SHARE * 100, size_text(limit),
                                                       what)

    def _check_row_budget(self, table, rows, grad):
        """MemoryError, before anything is asked, when `rows` rows of a
        forward of `table` (with their gradients when `grad`) and what this
        clock's forwards hold would pass the row budget: a batch that reads
        more rows than the worker should hold gets the figures, not an OOM
        kill."""
        if self._row_budget is None:
            return
        need = _row_bytes(rows, table.embedding_dim, grad)
        held = sum(_row_bytes(len(r), t.embedding_dim, True)
                   for t in self._tables for _, r in t._lookups)
        if held + need <= self._row_budget:
            return
        raise MemoryError(
            "gradstream: a forward of table '%s' reads %d unique rows, %s with their "
            "gradients%s, on top of %s this clock's forwards hold: past the worker's row budget "
            "of %s (%s); split the batch, or set gs.ParameterServer(model, row_budget=BYTES)" % (
                table._name, rows, size_text(need), "" if grad else " (none: no_grad)",
                size_text(held), size_text(self._row_budget), self._row_budget_why))

    def _rows_for(self, table, uniq):
        """Rows `uniq` (sorted unique ids) of `table` at the current clock
        (gs.Embedding's forward): the prefetched ones when they are these."""
        s = self._session
        t0 = time.perf_counter()
        pre, table._prefetched = table._prefetched, None
        rc = None
        if pre is not None and pre.clock == s.clock and torch.equal(pre.ids, uniq):
            rc, rows = pre.wait(PULL_TIMEOUT_MS)
            if rc != 0 and pre.fused:
                # The pull it rode in ended without them: given up (asked
                # again, or replaced by a membership change), or failed for
                # its dense chunks (DATA_LOSS from a shard that restarted
                # without a checkpoint, which the step loop answers when a
                # forward waits for them). Asks that could fail on their own
                # never ride (gs_end_clock_rows): pull them alone.
                rc = None
                self._prefetch_unused += 1
            else:
                self._prefetch_used += 1
        elif pre is not None:
            if pre.clock == s.clock:
                table._prefetched = pre  # for this clock's training forward, not this one
            else:
                pre.drop()
                self._prefetch_unused += 1
        if rc is None:
            rc, rows = RowPull(s.lib, s.handle, table._index, uniq, table.embedding_dim,
                               s.clock).wait(PULL_TIMEOUT_MS)
        self._row_pull_s += time.perf_counter() - t0
        self._call(rc)
        return rows

    def _row_asks(self, clock):
        """The prefetches of the rows the next batch's forwards will read,
        at reader clock `clock`, not yet asked: see [row prefetch]."""
        s = self._session
        feed = s.feed
        nxt = feed.next if feed is not None and feed.clock == clock - 1 else None
        asks = []
        for t in self._tables:
            self._drop_prefetch(t)
            source = t._next_ids(nxt)
            if source is None:
                continue
            ids, inverse = unique_ids(source)
            if (self._row_budget is not None and
                    _row_bytes(len(ids), t.embedding_dim, True) > self._row_budget):
                continue  # its forward raises with the figures
            asks.append((t, RowPull(s.lib, s.handle, t._index, ids, t.embedding_dim, clock,
                                    source, inverse, ask=False)))
        return asks

    def _end_clock(self, ended, asks, leave):
        """gs_end_clock, with the prefetches `asks` in the next clock's pull
        requests (gs_end_clock_rows); those it could not take are asked on
        their own."""
        s = self._session
        if not asks:
            return s.lib.gs_end_clock(s.handle, ended, self._targets(), ctypes.byref(leave))
        n = len(asks)
        pulls = (ctypes.c_void_p * n)()
        rc = s.lib.gs_end_clock_rows(
            s.handle, ended, self._targets(), ctypes.byref(leave), n,
            (ctypes.c_uint32 * n)(*[t._index for t, _ in asks]),
            (ctypes.c_void_p * n)(*[p.ids.data_ptr() for _, p in asks]),
            (ctypes.c_int64 * n)(*[len(p.ids) for _, p in asks]),
            (ctypes.c_void_p * n)(*[p.out.data_ptr() for _, p in asks]), pulls)
        for (t, pre), h in zip(asks, pulls):
            if h:
                pre.adopt(h)
                self._prefetch_fused += 1
            elif rc == 0 and not leave.value:
                pre.ask()
            if pre.rc == 0 and pre.asked:
                t._prefetched = pre
            else:
                pre.drop()  # the forward pulls them itself and says why
        return rc

    def _drop_prefetch(self, table):
        if table._prefetched is not None:
            table._prefetched.drop()
            table._prefetched = None
            self._prefetch_unused += 1

    def _push_tables(self, clock):
        """The gradients of the rows this clock's forwards touched."""
        s = self._session
        for t in self._tables:
            ids, grads = t._take_gradient()
            self._call(push_rows(s.lib, s.handle, t._index, ids, grads, clock))

    def _call(self, rc):
        """Checks a library call; the job's end (Cancelled) exits cleanly."""
        if rc == _lib.CANCELLED:
            self._exit("the job ended")
        _lib.check(self._session.lib, rc)

    def _copy_staged(self, indices):
        with torch.no_grad():
            for i in indices:
                st = self._staging[i]
                if st is not None:
                    self._params[i].data.copy_(st, non_blocking=False)

    def _make_hook(self, i):
        def hook(grad):
            self._push(i, grad)
            return grad
        return hook

    def _wait(self, indices):
        """Waits until the pull in flight has written `indices` (those not
        in place yet) and copies staged ones into their parameters."""
        todo = [i for i in indices if not self._ready[i]]
        if not todo:
            return
        s = self._session
        self._call(s.lib.gs_wait_tensors(s.handle, (ctypes.c_uint32 * len(todo))(*todo),
                                         len(todo)))
        self._copy_staged(todo)
        for i in todo:
            self._ready[i] = True
        self._unready -= len(todo)

    def synchronize(self):
        """Waits until every parameter of the pull in flight is in place (see
        [layer-wise wait]): before reading parameters outside a forward."""
        if self._local is None and self._unready:
            self._wait(range(len(self._params)))

    def _push(self, i, grad):
        s = self._session
        if self._pushed[i]:
            raise RuntimeError("gradstream: a second gradient for %r in clock %d: call "
                               "ps.step() after each backward()" % (self._names[i], s.clock))
        g = grad.detach()
        if g.dtype != torch.float32:
            raise TypeError("gradstream: gradient of %r is %s, want torch.float32" %
                            (self._names[i], g.dtype))
        if g.shape != self._shapes[i]:
            raise ValueError("gradstream: gradient of %r has shape %s, the parameter %s" %
                             (self._names[i], tuple(g.shape), tuple(self._shapes[i])))
        if g.is_cuda:
            g = g.to("cpu")
        g = g.contiguous()
        self._held[i] = (g, g._version)  # read by the encode thread until ps.step()
        _lib.check(s.lib, s.lib.gs_push(s.handle, i, g.data_ptr(), g.numel(), s.clock))
        self._pushed[i] = True

    def _release_held(self):
        """After gs_end_clock: the encode thread no longer reads the clock's
        gradients. Raises when one was changed in place meanwhile (see [push
        path])."""
        held, self._held = self._held, [None] * len(self._held)
        changed = [self._names[i] for i, h in enumerate(held)
                   if h is not None and h[0]._version != h[1]]
        if changed:
            raise RuntimeError(
                "gradstream: the gradient of %s was changed in place between backward() and "
                "ps.step(): gradstream pushes each gradient as backward produces it and encodes "
                "it while backward goes on, so a change made afterwards (clip_grad_norm_, "
                "p.grad.mul_(...)) is not pushed and races with the encode. Transform the "
                "gradient in a hook registered before the ParameterServer (p.register_hook), "
                "or scale the loss." % ", ".join(changed[:4]))

    def _exit(self, why):
        self._left = True  # nothing left to tell the shards
        print("gradstream: %s; exiting" % why, file=sys.stderr)
        raise SystemExit(0)

    # -- the training step

    def step(self, loss=None):
        """Ends this worker's clock (see [step loop] in
        worker/client/step_loop.h): pushes zeros for every parameter backward
        gave no gradient, asks for the parameters of the next clock (the
        consistency mode decides which version), advances the clock and
        waits until the shards acknowledged the clock's pushes -- not for
        the pull: each module's next forward waits for its own parameters
        (see [layer-wise wait]). Reports progress (`loss`, when given, goes
        into the reported average) in the background. Clears the
        parameters' .grad."""
        s = self._session
        if self._local is not None:
            self._local.step()
            self._local.zero_grad(set_to_none=True)
            s.clock += 1
            return
        for p in self._params:
            p.grad = None
        ended = s.clock
        s.clock += 1
        m = s.latest()
        if not m.active:
            self._exit("the job ended")
        self._push_tables(ended)
        asks = self._row_asks(s.clock)
        v = float("nan") if loss is None else (
            float(loss.detach()) if torch.is_tensor(loss) else float(loss))
        _lib.check(s.lib, s.lib.gs_record_step(s.handle, v, s.samples - self._samples_seen))
        self._samples_seen = s.samples
        leave = ctypes.c_int32(0)
        rc = self._end_clock(ended, asks, leave)
        self._release_held()
        self._call(rc)
        self._pushed = [False] * len(self._params)
        if leave.value:
            # A scale-down's leave clock (the library's rule, the trainer's).
            self._left = True
            _lib.check(s.lib, s.lib.gs_leave(s.handle, PUSH_TIMEOUT_MS))
            s.lib.gs_sync(s.handle, s.clock, 0.0, 0, 2)
            self._exit("scaled down: left the job after clock %d" % s.clock)
        for i in range(len(self._ready)):
            self._ready[i] = False
        self._unready = len(self._ready)
        self._wait_plan.abort()  # a forward that raised left its recording open
        self._report()
        s.adopt()

    def report(self, accuracy):
        """Reports a test-set accuracy (0..1) measured at the current clock;
        GradstreamError (a RuntimeError) for one outside [0, 1], which is
        not kept: later steps report the previous one."""
        kept, self._accuracy = self._accuracy, (float(accuracy), max(1, self._session.clock))
        if self._local is None:
            try:
                self._report()
            except _lib.GradstreamError:
                self._accuracy = kept
                raise

    def _report(self, wait=False, check=True):
        s = self._session
        acc, acc_clock = self._accuracy
        args = (s.handle, s.clock, acc, acc_clock)
        rc = s.lib.gs_sync(*args, 1) if wait else s.lib.gs_report(*args)
        if check:
            _lib.check(s.lib, rc)

    @property
    def clock(self):
        return self._session.clock

    def stats(self):
        """Bytes pushed and pulled (encoded and as fp32) and messages since
        init; the times the library's encode thread was woken for gradients
        (encode_wakeups: what is still queued at the step's end is encoded
        by ps.step() itself, without one); the seconds table forwards
        waited for their rows (row_pull_seconds) and how many row
        prefetches a forward used or were dropped unread (row_prefetch_used
        / _unused) and how many rode in the requests of the clock's dense
        pull (row_prefetch_fused); zeros in local mode."""
        s = self._session
        out = _lib.Stats()
        if s.distributed:
            _lib.check(s.lib, s.lib.gs_stats_get(s.handle, ctypes.byref(out)))
        stats = {f: getattr(out, f) for f, _ in _lib.Stats._fields_}
        stats["row_pull_seconds"] = self._row_pull_s
        stats["row_prefetch_used"] = self._prefetch_used
        stats["row_prefetch_unused"] = self._prefetch_unused
        stats["row_prefetch_fused"] = self._prefetch_fused
        return stats

    def job_spec(self):
        """The job's spec (proto text format); "" in local mode."""
        return self._session.job_spec_text() if self._session.distributed else ""
