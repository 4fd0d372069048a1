"""Embedding tables that live on the shards (docs/design/sparse-tables.md).

    emb = gs.Embedding(10_000_000, 64)        # no storage on the worker
    bag = gs.Embedding(1 << 24, 16, mode="sum")  # nn.EmbeddingBag's sum

A drop-in for nn.Embedding / nn.EmbeddingBag whose table is never whole on
a worker: gs.ParameterServer(model) declares it as a row-sparse table, each
forward pulls the rows its ids name (at the version the consistency mode
allows, as dense parameters are), and ps.step() pushes the gradients of the
rows the clock's forwards touched; the shards apply the job's optimizer to
those rows only. Why a module of its own and not nn.Embedding(sparse=True):
nn.Embedding allocates its whole weight at construction (a table larger
than the worker's memory cannot be built), and its forward reads that
weight, which a worker never holds.

Run single-process (local mode), the table is an ordinary dense parameter
(its rows start N(0, init_std^2) as on the shards, from torch's generator)
trained by the local optimizer.
"""

import ctypes
import resource

import torch
import torch.nn.functional as F

PULL_TIMEOUT_MS = 60_000
# The worker's row budget, unless gs.ParameterServer(model, row_budget=)
# says otherwise: this share of the memory the process may use.
ROW_BUDGET_SHARE = 0.25


class Embedding(torch.nn.Module):
    """num_embeddings x embedding_dim rows on the shards; mode None looks rows
    up (nn.Embedding), "sum" or "mean" reduces bags (nn.EmbeddingBag, with
    `offsets` for a 1-D input and per_sample_weights for "sum"). `ids_of`:
    for ids the model computes from gs.shard's batch (hashed, offset), the
    same computation as a function of the batch, so that ps.step() can
    prefetch the next batch's rows (NOTE [row prefetch]); a tensor of the
    batch itself is recognized without it."""

    def __init__(self, num_embeddings, embedding_dim, mode=None, init_std=1.0, ids_of=None):
        super().__init__()
        if num_embeddings <= 0 or embedding_dim <= 0:
            raise ValueError("gradstream: an embedding table wants num_embeddings and "
                             "embedding_dim > 0, got %d x %d" % (num_embeddings, embedding_dim))
        if mode not in (None, "sum", "mean"):
            raise ValueError("gradstream: Embedding mode %r: want None, 'sum' or 'mean'" % (mode,))
        if ids_of is not None and not callable(ids_of):
            raise TypeError("gradstream: Embedding ids_of is %r, want a function of the batch"
                            % (ids_of,))
        self.num_embeddings = int(num_embeddings)
        self.embedding_dim = int(embedding_dim)
        self.mode = mode
        self.init_std = float(init_std)
        self.weight = None   # local mode only: the dense table
        self._ps = None      # the ParameterServer serving it (a job)
        self._index = None   # its tensor index in the job's shard map
        self._lookups = []   # this clock's (unique ids, pulled rows)
        self._feed = None    # which tensor of gs.shard's batch holds the ids (prefetch)
        self.ids_of = ids_of  # or: the ids as a function of gs.shard's batch (prefetch)
        self._prefetched = None  # a RowPull of the next batch's rows, asked by ps.step()

    def extra_repr(self):
        return "%d, %d%s" % (self.num_embeddings, self.embedding_dim,
                             "" if self.mode is None else ", mode=%r" % self.mode)

    # -- set up by ParameterServer

    def _materialize_local(self):
        w = torch.randn(self.num_embeddings, self.embedding_dim) * self.init_std
        self.weight = torch.nn.Parameter(w)

    def _attach(self, ps, index, name):
        self._ps = ps
        self._index = index
        self._name = name

    # -- forward

    def _check_ids(self, ids):
        if ids.dtype not in (torch.int64, torch.int32):
            raise TypeError("gradstream: embedding ids are %s, want an integer tensor" % ids.dtype)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.num_embeddings):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise IndexError("gradstream: embedding id %d is out of range: the table has %d "
                             "rows" % (bad, self.num_embeddings))

    def _lookup(self, ids, table, offsets, per_sample_weights):
        if self.mode is None:
            return F.embedding(ids, table)
        return F.embedding_bag(ids, table, offsets, mode=self.mode,
                               per_sample_weights=per_sample_weights)

    def forward(self, ids, offsets=None, per_sample_weights=None):
        if self.weight is not None:
            self._check_ids(ids)
            return self._lookup(ids, self.weight, offsets, per_sample_weights)
        if self._ps is None:
            raise RuntimeError("gradstream: build gs.ParameterServer(model) before the first "
                               "forward of a gs.Embedding")
        pre = self._prefetched
        if pre is not None and pre.source is ids and pre.version == ids._version:
            # checked and made unique when the prefetch was asked
            uniq, inverse = pre.ids, pre.inverse
        else:
            self._check_ids(ids)
            uniq, inverse = unique_ids(ids)
        if torch.is_grad_enabled() and self._feed is None and self.ids_of is None:
            self._feed = self._ps._feed_position(ids)
        self._ps._check_row_budget(self, len(uniq), torch.is_grad_enabled())
        rows = self._ps._rows_for(self, uniq)
        if torch.is_grad_enabled():
            rows.requires_grad_(True)
            self._lookups.append((uniq, rows))
        out = self._lookup(inverse.view(ids.shape).to(ids.device), rows.to(ids.device), offsets,
                           per_sample_weights)
        return out

    def _next_ids(self, batch):
        """The ids this table's next forward reads of `batch` (gs.shard's
        next batch; None: there is none): ids_of(batch), or the batch's
        tensor the forwards read. None when that cannot be told or the ids
        would be refused (the forward then pulls, and raises)."""
        if batch is None:
            return None
        if self.ids_of is not None:
            ids = self.ids_of(batch)
            if not torch.is_tensor(ids):
                raise TypeError("gradstream: ids_of of table '%s' returned %s, want a tensor of "
                                "ids" % (self._name, type(ids).__name__))
        elif (self._feed is None or not isinstance(batch, (tuple, list)) or
              self._feed >= len(batch)):
            return None
        else:
            ids = batch[self._feed]
        try:
            self._check_ids(ids)
        except (TypeError, IndexError):
            return None
        return ids

    def _take_gradient(self):
        """The clock's touched rows and their summed gradients (each id
        once), and forgets the clock's lookups. (None, None) when backward
        reached no row."""
        looked, self._lookups = self._lookups, []
        got = [(u, r.grad) for u, r in looked if r.grad is not None]
        if not got:
            return None, None
        if len(got) == 1:
            return got[0][0], got[0][1].contiguous()
        ids = torch.cat([u for u, _ in got])
        grads = torch.cat([g for _, g in got])
        uniq, inverse = torch.unique(ids, sorted=True, return_inverse=True)
        summed = torch.zeros(len(uniq), self.embedding_dim).index_add_(0, inverse, grads)
        return uniq, summed


def tables_of(model):
    """The model's gs.Embedding modules, in module order (each once)."""
    seen, out = set(), []
    for m in model.modules():
        if isinstance(m, Embedding) and id(m) not in seen:
            seen.add(id(m))
            out.append(m)
    return out


def memory_limit():
    """(bytes, what sets them): the least memory this process may use of
    its RLIMIT_AS and RLIMIT_DATA, its cgroup's limit and the machine's."""
    found = []
    for name in ("RLIMIT_AS", "RLIMIT_DATA"):
        soft, _ = resource.getrlimit(getattr(resource, name))
        if soft != resource.RLIM_INFINITY:
            found.append((soft, name))
    try:
        with open("/proc/self/cgroup") as f:
            paths = [l.strip().split(":", 2)[2] for l in f if l.startswith("0::")]
        for path in paths:  # cgroup v2
            with open("/sys/fs/cgroup%s/memory.max" % path.rstrip("/")) as f:
                text = f.read().strip()
            if text.isdigit():
                found.append((int(text), "the cgroup's memory.max"))
    except (OSError, IndexError):
        pass
    try:
        with open("/proc/meminfo") as f:
            kb = next(int(l.split()[1]) for l in f if l.startswith("MemTotal:"))
        found.append((kb << 10, "the machine's memory"))
    except (OSError, StopIteration, ValueError):
        pass
    return min(found) if found else (None, None)


def size_text(n):
    """Bytes as people read them: 512 B, 31.2 KiB, 1.0 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return ("%d %s" if unit == "B" else "%.1f %s") % (n, unit)
        n /= 1024.0


def unique_ids(ids):
    """(sorted unique ids as int64 on the CPU, each id's index among them)."""
    return torch.unique(ids.reshape(-1).cpu().to(torch.int64), sorted=True, return_inverse=True)


class RowPull:
    """Rows `ids` (int64, non-negative, sorted unique) of table `index` at
    `clock`, asked at construction and waited for by wait() (the library
    asks a large pull in parts). Holds `out` until the pull has ended
    (waited or dropped), so the library never writes into freed memory. A
    prefetch also keeps the batch tensor it read (`source`) and its ids'
    `inverse`."""

    def __init__(self, lib, handle, index, ids, dim, clock, source=None, inverse=None, ask=True):
        self.ids, self.clock, self.index = ids.contiguous(), clock, index
        self.source, self.inverse = source, inverse
        self.version = source._version if source is not None else None
        self.out = torch.empty(len(ids), dim, dtype=torch.float32)
        self._lib, self._handle, self._h, self.rc = lib, handle, None, 0
        self.fused = False
        if ask:
            self.ask()

    def ask(self):
        """Asks for the rows on their own (the constructor does, unless
        `ask` is false: gs_end_clock_rows asks them with the clock's pull
        and hands over the handle with `adopt`)."""
        h = ctypes.c_void_p()
        self.rc = self._lib.gs_pull_rows_start(
            self._handle, self.index, ctypes.c_void_p(self.ids.data_ptr()), len(self.ids),
            self.clock, ctypes.c_void_p(self.out.data_ptr()), ctypes.byref(h))
        if self.rc == 0:
            self._h = h

    @property
    def asked(self):
        """Whether the rows are asked and not yet waited for or dropped."""
        return self._h is not None

    def adopt(self, h):
        """`h`: gs_end_clock_rows's handle for these rows, which ride in
        the clock's pull (`fused`)."""
        self._h = h
        self.fused = True

    def wait(self, timeout_ms=60_000):
        """(rc, rows): 0 and the rows, or the failure's code."""
        h, self._h = self._h, None
        rc = self.rc
        if h is not None:
            rc = self._lib.gs_rows_wait(self._handle, h, timeout_ms)
        return rc, self.out

    def drop(self):
        h, self._h = self._h, None
        if h is not None:
            self._lib.gs_rows_drop(h)

    __del__ = drop


def push_rows(lib, handle, index, ids, grads, clock):
    """The gradients of rows `ids` (each once) of table `index` at `clock`;
    copied by the library before it returns."""
    if ids is None:
        return 0  # nothing touched: gs_end_clock pushes the empty one
    ids = ids.contiguous()
    grads = grads.detach().to("cpu", torch.float32).contiguous()
    return lib.gs_push_rows(handle, index, ctypes.c_void_p(ids.data_ptr()), len(ids),
                            ctypes.c_void_p(grads.data_ptr()), clock)
