#!/usr/bin/env python3
"""The layer-wise wait's plan, without a cluster (gradstream/_wait_plan.py):
the first forward of each module in each mode waits for every parameter and
records what the module's own code reads; later forwards wait, per module,
for exactly that. What a module reads is not what it owns:
nn.MultiheadAttention reads out_proj, nn.TransformerEncoderLayer's eval
fast path its whole block, a parent its child's weight."""

import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

check = cluster.check


def main():
    args = cluster.main_args()
    cluster.require_torch()
    cluster.package_without_cluster(args.build)
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from gradstream import _wait_plan

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, x):
            return F.linear(x, self.proj.weight, self.proj.bias)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.first = nn.Linear(8, 8)
            self.act = nn.ReLU()
            self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
            self.block = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
            self.head = Head()

        def forward(self, x):
            x = self.act(self.first(x))
            x = self.attn(x, x, x, need_weights=False)[0]
            return self.head(self.block(x))

    torch.manual_seed(0)
    net = Net()
    names = [n for n, p in net.named_parameters()]
    params = [p for n, p in net.named_parameters()]
    idx = {n: i for i, n in enumerate(names)}

    def under(prefix):
        return [idx[n] for n in names if n.startswith(prefix)]

    waits = []
    plan = _wait_plan.WaitPlan(net, params, lambda ind: waits.append(sorted(ind)),
                               lambda: True)
    x = torch.randn(2, 3, 8)
    everything = list(range(len(params)))

    def forward(train, grad):
        del waits[:]
        net.train(train)
        with torch.set_grad_enabled(grad):
            net(x)
        return list(waits)

    # The first forward in a mode: one wait for everything, then recorded.
    check(forward(True, True) == [everything], "the first training forward waits for all")
    got = forward(True, True)
    want = [under("first."), under("attn."),          # attn reads out_proj itself
            under("block."),                          # a fast-path module: its whole block
            under("block.self_attn."),                # the block's attention, as attn
            under("block.linear1."), under("block.linear2."),
            under("block.norm1."), under("block.norm2."),
            under("head.")]                           # the parent reads proj
    check(sorted(map(tuple, got)) == sorted(map(tuple, want)),
          "training forward waits\n  got  %s\n  want %s" % (got, want))
    check(got.index(under("attn.")) < got.index(under("block.")) < got.index(under("head.")),
          "waits in forward order: %s" % got)

    # Eval under no_grad is a new mode (the encoder layer's fast path): a
    # synchronized, recorded first forward, then the block waits for all of
    # it in its own pre-hook (its children's pre-hooks never fire).
    check(forward(False, False) == [everything], "the first eval forward waits for all")
    got = forward(False, False)
    check(under("block.") in got and under("block.linear1.") not in got,
          "eval forward: the block waits for its whole subtree, its children do not "
          "run: %s" % got)
    check(under("head.") in got and under("attn.") in got, "eval waits: %s" % got)

    # A forward that raises leaves no recording open once abort() runs (as
    # ps.step() does), and the next forward in a new mode records normally.
    net.train(True)
    try:
        with torch.no_grad():
            net(torch.randn(2, 3, 5))  # wrong width: raises in first
    except RuntimeError:
        pass
    plan.abort()
    check(forward(True, False) == [everything], "after the raise: recorded afresh")
    check(len(forward(True, False)) > 1, "then per-module waits again")

    # Where reads cannot be recorded: wait for everything, one warning that
    # names the module.
    net2 = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    p2 = list(net2.parameters())
    real = _wait_plan._Recorder.__enter__
    _wait_plan._Recorder.__enter__ = lambda self: (_ for _ in ()).throw(RuntimeError("no"))
    try:
        w2 = []
        plan2 = _wait_plan.WaitPlan(net2, p2, lambda ind: w2.append(sorted(ind)), lambda: True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            net2(torch.randn(1, 4))
            del w2[:]
            net2(torch.randn(1, 4))
    finally:
        _wait_plan._Recorder.__enter__ = real
    check(w2 and w2[0] == [0, 1, 2, 3], "unrecordable: waits for everything first: %s" % w2)
    msgs = [str(w.message) for w in caught if issubclass(w.category, _wait_plan.ReadWarning)]
    check(len(msgs) == 1 and "<model> (Sequential)" in msgs[0],
          "one ReadWarning naming the module: %s" % msgs)
    del plan2
    print("PASS")


if __name__ == "__main__":
    main()
