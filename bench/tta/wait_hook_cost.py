#!/usr/bin/python3
"""CPU per training step of one process with the layer-wise wait's hooks
(docs/design/layer-wise-wait.md): the family's model with no hooks, with
the old per-owner pre-hooks, and with WaitPlan's hooks (every parameter in
place, so what is measured is the hooks, not a wait). Steps alternate
between the three models, so drift cancels; prints the median per-step
ratios.

    LD_LIBRARY_PATH=<openblas-pthread> bench/tta/wait_hook_cost.py --model vit
"""
import argparse, os, statistics, sys, time
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
import torch
import train as T
from gradstream._wait_plan import WaitPlan


def make(model, kind):
    torch.manual_seed(1)
    net = T.build(model, 10)
    params = list(net.parameters())
    if kind == "old":  # the rule before: each module waits for what it owns
        index = {id(p): i for i, p in enumerate(params)}
        ready = [True] * len(params)
        for m in net.modules():
            own = [index[id(p)] for p in m.parameters(recurse=False)]
            if own:
                def pre_hook(mod, inp, own=own):  # returns None: the input stays
                    if all(ready[i] for i in own):
                        return
                m.register_forward_pre_hook(pre_hook)
    elif kind == "plan":
        WaitPlan(net, params, lambda indices: None, lambda: False)
    return net


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=("widecnn", "resnet", "vit"), default="vit")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=32, help="per worker: bench/tta's 64 over 2")
    args = ap.parse_args()
    torch.set_num_threads(1)
    x, y = torch.randn(args.batch, 1, 28, 28), torch.randint(0, 10, (args.batch,))
    nets = {k: make(args.model, k) for k in ("none", "old", "plan")}
    ms = {k: [] for k in nets}
    for _ in range(args.steps):
        for k, net in nets.items():
            t0 = time.process_time()
            net.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            ms[k].append(1000 * (time.process_time() - t0))
    skip = 2  # the plan's first forward records its reads
    for k in ms:
        print("%s %-4s CPU ms/step median %.2f" % (args.model, k, statistics.median(ms[k][skip:])))
    for a, b in (("plan", "old"), ("plan", "none")):
        r = statistics.median(p / q for p, q in zip(ms[a][skip:], ms[b][skip:]))
        print("%s %s/%s per step, median %.3f" % (args.model, a, b, r))


if __name__ == "__main__":
    main()
