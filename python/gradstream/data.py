"""Data sharding: each worker's piece of every (global) batch, re-divided
when the membership changes at a clock boundary.
"""

import ctypes
import json
import os

import torch

from gradstream import _lib
from gradstream.session import Feed, _session

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
    """One pass over `perm` as this rank's batches: the library's split
    (worker/runtime/data_split.h, the rule the built-in trainer follows too).

    Per-worker batches: perm is padded with its first indices to a multiple
    of world_size (as torch's DistributedSampler does), rank r takes
    perm[r::world_size], cut into batch_size pieces.

    Global batches: perm is cut into ceil(len / global_batch_size) global
    batches and rank r takes every world_size-th index of each, so a clock
    consumes the same samples whatever the world size and every rank makes
    the same number of clocks per pass. A last batch smaller than
    world_size is padded with the pass's first indices, so that every rank
    has a piece."""
    lib = _lib.shared()  # in local mode too: the split is the library's
    p = perm.to(torch.int64).contiguous()
    n = len(p)
    out = torch.empty(n + world_size, dtype=torch.int64)
    sizes = torch.empty(n + 1, dtype=torch.int64)
    count = ctypes.c_int64(0)
    i64 = ctypes.POINTER(ctypes.c_int64)
    rc = lib.gs_split_pass(ctypes.cast(p.data_ptr(), i64), n, rank, world_size,
                           batch_size or 0, global_batch_size or 0,
                           ctypes.cast(out.data_ptr(), i64), ctypes.cast(sizes.data_ptr(), i64),
                           ctypes.byref(count))
    if rc != 0:
        raise ValueError(lib.gs_last_error().decode("utf-8", "replace"))
    lengths = sizes[:count.value].tolist()
    return list(torch.split(out[:sum(lengths)], lengths)) if lengths else []


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
    members' shares are disjoint and cover the dataset. The permutation
    depends on (seed, the clock the pass starts
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
        # A job with tables takes each batch one ahead, so that ps.step() can
        # ask for the next batch's rows before the clock ends ([row prefetch]).
        ahead = (s.distributed and s.ps is not None and bool(s.ps._tables) and
                 os.environ.get("GRADSTREAM_ROW_PREFETCH", "1") != "0")
        nxt = None
        for k, idx in enumerate(batches):
            if steps is not None and s.clock >= steps:
                return
            if s.current.epoch != m.epoch:
                changed = True
                break
            s.samples += len(idx)
            batch = nxt if nxt is not None else take(idx)
            more = k + 1 < len(batches) and (steps is None or s.clock + 1 < steps)
            nxt = take(batches[k + 1]) if ahead and more else None
            s.feed = Feed(s.clock, batch, nxt)
            yield batch
        if changed:
            continue
        if steps is None or s.clock >= steps:
            return
