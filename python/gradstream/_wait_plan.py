"""Which parameters each module's forward reads: the layer-wise wait's plan.

After ps.step() the pull of the next clock writes the parameters in place
while the next forward runs; a forward may read a parameter only once it has
been waited for. What a module owns is not what its forward reads
(nn.MultiheadAttention reads out_proj's weight without calling out_proj;
nn.TransformerEncoderLayer's inference fast path reads its whole block; a
parent may call F.linear(x, self.fc.weight)). So the plan is measured: the
first forward of each module in each mode runs with every parameter in place
and records, per module, the parameters its own code reads (a
TorchDispatchMode sees every operator's tensor arguments without changing
which path PyTorch takes). See docs/design/layer-wise-wait.md.
"""

import bisect
import warnings

import torch

try:  # torch >= 1.13
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
except ImportError:  # pragma: no cover - older torch: every forward waits for all
    TorchDispatchMode = None

# Modules whose forward picks, from its inputs, between calling its children
# and reading their parameters itself (the inference fast path): they wait
# for their whole subtree, whichever path the first forward took.
_PATH_FROM_INPUTS = (torch.nn.TransformerEncoderLayer,)


class ReadWarning(UserWarning):
    """A module's reads could not be recorded: it waits for every parameter."""


def _mode_key(module):
    """What decides a module's path besides its inputs."""
    return (torch.is_grad_enabled(), module.training, torch.is_autocast_enabled())


class _Locator:
    """Maps a tensor to the parameter whose memory it views (or None)."""

    def __init__(self, params):
        spans = sorted((p.device.type, p.device.index or 0, p.data_ptr(),
                        p.data_ptr() + p.numel() * p.element_size(), i)
                       for i, p in enumerate(params) if p.numel() > 0)
        self._keys = [s[:3] for s in spans]
        self._spans = spans

    def find(self, t):
        try:
            ptr = t.data_ptr()
        except (RuntimeError, NotImplementedError):  # sparse, nested, meta
            return None
        key = (t.device.type, t.device.index or 0, ptr)
        k = bisect.bisect_right(self._keys, key) - 1
        if k < 0:
            return None
        dev, idx, start, end, i = self._spans[k]
        if (dev, idx) == key[:2] and start <= ptr < end:
            return i
        return None


class _Recorder(TorchDispatchMode if TorchDispatchMode else object):
    """Attributes each operator's parameter arguments to the innermost module
    whose forward is running (the top of `frames`)."""

    def __init__(self, locator, frames):
        super().__init__()
        self._locate = locator.find
        self._frames = frames

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        reads = self._frames[-1][2]
        for a in tree_flatten((args, kwargs))[0]:
            if isinstance(a, torch.Tensor):
                i = self._locate(a)
                if i is not None:
                    reads.add(i)
        return func(*args, **kwargs)


class WaitPlan:
    """Forward pre-hooks that wait, per module, for the parameters its
    forward reads. `wait(indices)` blocks until those parameters are in
    place; `pending()` is true while some parameter is not."""

    def __init__(self, model, params, wait, pending):
        self._params = params
        self._wait = wait
        self._pending = pending
        self._locator = _Locator(params)
        index = {id(p): i for i, p in enumerate(params)}
        named = list(model.named_modules())
        self._modules = [m for _, m in named]
        self._names = [n or "<model>" for n, _ in named]
        self._subtree = []
        self._own = []
        for m in self._modules:
            self._subtree.append(frozenset(index[id(p)] for p in m.parameters()
                                           if id(p) in index))
            self._own.append(frozenset(index[id(p)] for p in m.parameters(recurse=False)
                                       if id(p) in index))
        self._inclusive = {k for k, m in enumerate(self._modules)
                           if isinstance(m, _PATH_FROM_INPUTS)}
        self._reads = {}   # (module index, mode key) -> parameters its own code read
        self._plans = {}   # (module index, mode key) -> tuple waited for in its pre-hook
        self._frames = None  # while recording: [(module index, key, reads)], innermost last
        self._recorder = None
        self._warned = False
        self._everything = tuple(range(len(params)))
        for k, m in enumerate(self._modules):
            m.register_forward_pre_hook(self._make_pre_hook(k))
            m.register_forward_hook(self._make_post_hook(k))

    def _make_pre_hook(self, k):
        plans = self._plans

        def pre_hook(module, inputs):
            key = _mode_key(module)
            if self._frames is not None:
                self._frames.append((k, key, set()))
                return
            plan = plans.get((k, key))
            if plan is None:
                self._record(k, key)
            elif plan and self._pending():
                self._wait(plan)
        return pre_hook

    def _make_post_hook(self, k):
        def post_hook(module, inputs, output):
            if self._frames is not None:
                self._pop(k)
        return post_hook

    def _record(self, k, key):
        """Runs module k's forward (starting now) with every parameter in
        place and its reads recorded; a module that cannot be recorded waits
        for everything, with a warning that names it."""
        self._wait(self._everything)
        if TorchDispatchMode is None:
            self._fall_back(k, key, "this torch has no TorchDispatchMode")
            return
        self._frames = [(k, key, set())]
        self._recorder = _Recorder(self._locator, self._frames)
        try:
            self._recorder.__enter__()
        except Exception as e:  # noqa: BLE001 - any failure means: wait for all
            self._frames, self._recorder = None, None
            self._fall_back(k, key, "its reads could not be recorded (%s)" % e)

    def _fall_back(self, k, key, why):
        self._plans[(k, key)] = self._everything
        if not self._warned:  # the cause is the same for every module: say it once
            self._warned = True
            warnings.warn("gradstream: %s; module %s and every other module whose reads are "
                          "not known wait for every parameter before their forward (correct, "
                          "without overlap)" % (why, self._name(k)), ReadWarning, stacklevel=4)

    def _name(self, k):
        return "%s (%s)" % (self._names[k], type(self._modules[k]).__name__)

    def _pop(self, k):
        k_top, key, reads = self._frames.pop()
        if k_top != k:  # a forward raised between pre- and post-hook
            self.abort()
            return
        merged = self._reads.setdefault((k, key), set())
        merged |= reads
        self._plans[(k, key)] = self._plan(k, key)
        if merged & (self._subtree[k] - self._own[k]):
            self._make_inclusive(k)
        if not self._frames:
            self._stop()

    def _make_inclusive(self, k):
        """Module k read a descendant's parameter itself: from now on it waits
        for its whole subtree in every mode."""
        if k in self._inclusive:
            return
        self._inclusive.add(k)
        for (m, key) in self._reads:
            if m == k:
                self._plans[(m, key)] = self._plan(m, key)

    def _plan(self, k, key):
        reads = set(self._reads[(k, key)])
        if k in self._inclusive:
            reads |= self._subtree[k]
        return tuple(sorted(reads))

    def _stop(self):
        recorder, self._recorder, self._frames = self._recorder, None, None
        recorder.__exit__(None, None, None)

    def abort(self):
        """Ends a recording a raised forward left open (its plans are not
        kept for the modules still open)."""
        if self._recorder is not None:
            self._stop()
