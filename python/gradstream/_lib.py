"""ctypes binding of libgradstream_c (worker/capi/gradstream_c.h).

The library is found, in order, at $GRADSTREAM_LIB, beside this file (an
installed package or build/python), or in a build tree next to the sources.
"""

import ctypes
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


class Membership(ctypes.Structure):
    _fields_ = [
        ("active", ctypes.c_int32),
        ("rank", ctypes.c_uint32),
        ("world_size", ctypes.c_uint32),
        ("epoch", ctypes.c_uint64),
        ("epoch_clock", ctypes.c_uint64),
        ("join_clock", ctypes.c_uint64),
        ("leave", ctypes.c_int32),
        ("leave_clock", ctypes.c_uint64),
        ("worker_id", ctypes.c_uint64),
    ]


class Stats(ctypes.Structure):
    _fields_ = [
        ("bytes_pushed", ctypes.c_uint64),
        ("fp32_bytes_pushed", ctypes.c_uint64),
        ("chunks_pushed", ctypes.c_uint64),
        ("bytes_pulled", ctypes.c_uint64),
        ("reconnects", ctypes.c_uint64),
        ("fp32_bytes_pulled", ctypes.c_uint64),
        ("bytes_pulled_discarded", ctypes.c_uint64),
        ("push_messages", ctypes.c_uint64),
        ("pull_messages", ctypes.c_uint64),
        ("encode_wakeups", ctypes.c_uint64),
    ]


class OptimizerDefaults(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int32),
        ("learning_rate", ctypes.c_float),
        ("momentum", ctypes.c_float),
        ("epsilon", ctypes.c_float),
        ("initial_accumulator", ctypes.c_float),
        ("beta1", ctypes.c_float),
        ("beta2", ctypes.c_float),
        ("weight_decay", ctypes.c_float),
    ]


class GradstreamError(RuntimeError):
    """A failed library call; `code` is the absl status code."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


CANCELLED = 1
DEADLINE_EXCEEDED = 4


def _candidates():
    env = os.environ.get("GRADSTREAM_LIB")
    if env:
        yield env
    yield os.path.join(_HERE, "libgradstream_c.so")
    repo = os.path.dirname(os.path.dirname(_HERE))
    yield os.path.join(repo, "build", "worker", "capi", "libgradstream_c.so")


_loaded = None


def shared():
    """The library, loaded once per process (load() for a fresh handle)."""
    global _loaded
    if _loaded is None:
        _loaded = load()
    return _loaded


def load():
    tried = []
    for path in _candidates():
        if os.path.exists(path):
            lib = ctypes.CDLL(path)
            _declare(lib)
            return lib
        tried.append(path)
    raise ImportError(
        "gradstream: libgradstream_c.so not found (tried %s); build it with "
        "`ninja -C build gs_python` and `python3 -m pip install build/python`, "
        "or set GRADSTREAM_LIB" % ", ".join(tried))


def _declare(lib):
    c = ctypes
    p = c.c_void_p
    lib.gs_last_error.restype = c.c_char_p
    lib.gs_last_error.argtypes = []
    lib.gs_open.restype = p
    lib.gs_open.argtypes = [c.c_char_p, c.c_int64]
    lib.gs_declare.argtypes = [p, c.c_int32, c.POINTER(c.c_char_p), c.POINTER(c.c_int32),
                               c.POINTER(c.c_int64), c.POINTER(c.c_float), c.c_int64]
    lib.gs_pull_rows.argtypes = [p, c.c_uint32, c.c_void_p, c.c_int64, c.c_uint64, c.c_void_p,
                                 c.c_int64]
    lib.gs_push_rows.argtypes = [p, c.c_uint32, c.c_void_p, c.c_int64, c.c_void_p, c.c_uint64]
    lib.gs_pull_rows_start.argtypes = [p, c.c_uint32, c.c_void_p, c.c_int64, c.c_uint64,
                                       c.c_void_p, c.POINTER(c.c_void_p)]
    lib.gs_rows_wait.argtypes = [p, c.c_void_p, c.c_int64]
    lib.gs_rows_drop.argtypes = [p]
    lib.gs_rows_drop.restype = None
    lib.gs_membership_get.argtypes = [p, c.POINTER(Membership)]
    lib.gs_membership_at.argtypes = [p, c.c_uint64, c.POINTER(Membership)]
    lib.gs_job_spec.argtypes = [p, c.c_char_p, c.c_int64, c.POINTER(c.c_int64)]
    lib.gs_sync.argtypes = [p, c.c_uint64, c.c_float, c.c_uint64, c.c_int32]
    lib.gs_report.argtypes = [p, c.c_uint64, c.c_float, c.c_uint64]
    lib.gs_record_step.argtypes = [p, c.c_double, c.c_uint64]
    lib.gs_set_encode_path.argtypes = [p, c.c_char_p]
    lib.gs_init_params.argtypes = [p, c.POINTER(c.c_void_p), c.c_int64]
    lib.gs_push.argtypes = [p, c.c_uint32, c.c_void_p, c.c_uint64, c.c_uint64]
    lib.gs_wait_pushes.argtypes = [p, c.c_int64]
    lib.gs_end_clock.argtypes = [p, c.c_uint64, c.POINTER(c.c_void_p), c.POINTER(c.c_int32)]
    lib.gs_end_clock_rows.argtypes = [p, c.c_uint64, c.POINTER(c.c_void_p), c.POINTER(c.c_int32),
                                      c.c_int32, c.c_void_p, c.c_void_p, c.c_void_p, c.c_void_p,
                                      c.c_void_p]
    lib.gs_pull_start.argtypes = [p, c.c_uint64, c.POINTER(c.c_void_p)]
    lib.gs_wait_tensors.argtypes = [p, c.POINTER(c.c_uint32), c.c_int32]
    lib.gs_tensors_ready.argtypes = [p, c.POINTER(c.c_uint32), c.c_int32]
    lib.gs_abandon_pull.argtypes = [p]
    lib.gs_pull.argtypes = [p, c.c_uint64, c.POINTER(c.c_void_p)]
    lib.gs_leave.argtypes = [p, c.c_int64]
    lib.gs_stats_get.argtypes = [p, c.POINTER(Stats)]
    lib.gs_split_pass.argtypes = [c.POINTER(c.c_int64), c.c_int64, c.c_uint32, c.c_uint32,
                                  c.c_int64, c.c_int64, c.POINTER(c.c_int64),
                                  c.POINTER(c.c_int64), c.POINTER(c.c_int64)]
    lib.gs_optimizer_defaults_get.argtypes = [c.c_char_p, c.POINTER(OptimizerDefaults)]
    lib.gs_close.argtypes = [p]
    lib.gs_close.restype = None
    for name in ("gs_declare", "gs_membership_get", "gs_membership_at", "gs_job_spec", "gs_sync",
                 "gs_report", "gs_record_step", "gs_set_encode_path", "gs_init_params", "gs_push",
                 "gs_wait_pushes", "gs_end_clock", "gs_end_clock_rows", "gs_pull_start",
                 "gs_wait_tensors", "gs_tensors_ready", "gs_abandon_pull", "gs_pull", "gs_leave",
                 "gs_stats_get", "gs_split_pass", "gs_optimizer_defaults_get", "gs_pull_rows",
                 "gs_push_rows", "gs_pull_rows_start", "gs_rows_wait"):
        getattr(lib, name).restype = c.c_int


def check(lib, rc):
    if rc != 0:
        raise GradstreamError(rc, lib.gs_last_error().decode("utf-8", "replace"))
