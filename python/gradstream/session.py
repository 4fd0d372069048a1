"""The session and rendezvous: which job this process trains for, its rank
and world size at each clock, and the connection to its gs_worker (the
agent on a Unix socket that gs_worker serves to the script it runs; see
worker/trainer/script_runner.h). Without GRADSTREAM_AGENT the process runs
single-process (local mode): rank 0 of 1, no session (the library is loaded
only for what is computed the same way in both modes, the data split).
"""

import atexit
import ctypes
import os

from gradstream import _lib

DEFAULT_TIMEOUT_S = 600.0   # waits for the shard map / the other ranks

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


class Feed:
    """The batch gs.shard yielded at `clock` and the one it yields next (None
    when it cannot tell): what a table's row prefetch reads ([row prefetch]
    in parameter_server.py)."""

    def __init__(self, clock, batch, next_batch):
        self.clock = clock
        self.batch = batch
        self.next = next_batch


class _Session:
    def __init__(self, agent, timeout):
        self.lib = None
        self.handle = None
        self.distributed = agent is not None
        self.job_id = os.environ.get("GRADSTREAM_JOB_ID", "")
        self.current = Membership(0, 1, 0, 0, self.job_id, self.distributed)
        self.clock = 0
        self.samples = 0           # yielded by shard(), for samples/s
        self.feed = None           # shard()'s Feed: the clock's batch and the next
        self.ps = None
        if self.distributed:
            self.lib = _lib.load()
            self.handle = self.lib.gs_open(agent.encode(), int(timeout * 1000))
            if not self.handle:
                raise _lib.GradstreamError(-1, self.lib.gs_last_error().decode())
            # Last at exit (atexit runs in reverse): after the
            # ParameterServer's final report and Leave.
            atexit.register(self.close)
            self.adopt(force=True, at_clock=False)  # no clock yet: the newest

    def close(self):
        """Stops the session's threads and closes its streams (gs_close)."""
        if self.handle:
            handle, self.handle = self.handle, None
            self.lib.gs_close(handle)

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


def session():
    """The process's session (init() first)."""
    return _session()


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
