#!/usr/bin/python3
"""A gradstream sync job simulated in one process, for studying codecs and
their error control fast (docs/design/precision-control.md): W workers'
gradients at the worker copy q, each pushed through a codec with error
feedback, averaged and applied with momentum SGD to p (the shards), and q
pulled through a codec with the shard-side residual p - q. The codecs are
re-implemented in torch (ternary, and ternary512 with a scale per 512
elements, with the kernels' 8-bit draws under --u8,
MXNet's 2-bit with t = mean |x|, int8, fp16); per tensor and direction a
controller (the rule of common/job/precision.h under --flush) may send
exact or raise the codec along --ladder; each push tensor's owed descent
<e, g> / |g|^2 ([owed descent] in common/job/precision.h) is printed at the
end, and --proj makes the push controller read it instead of |e| / |g|.
Models and data are bench/tta's.

    bench/tta/codec_sim.py --model vit --steps 300 --u8 --bound 0        # no control
    bench/tta/codec_sim.py --model vit --steps 300 --u8 --bound 8 --flush --ladder ternary,none
"""
import argparse, json, math, sys, time
import os
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
import torch, torch.nn.functional as F
import train as T
import gradstream.torch as gs

def ternary(x, gen):
    m = float(x.abs().max()); sd = float(x.std(unbiased=False))
    s = min(m, 2.5 * sd)
    if s == 0: return torch.zeros_like(x)
    prob = x.abs().clamp(max=s) / s
    u = torch.rand(x.shape, generator=gen)
    if U8: u = torch.floor(u * 256) / 256   # the kernels' 8-bit uniform
    return torch.where(u < prob, torch.sign(x) * s, torch.zeros_like(x))

def ternary_blocks(x, gen, block=512):  # one scale per `block` elements (QSGD's buckets)
    flat = x.reshape(-1); n = flat.numel(); pad = (-n) % block
    b = torch.cat([flat, flat.new_zeros(pad)]).view(-1, block)
    cnt = torch.full((b.shape[0], 1), float(block)); cnt[-1] = block - pad
    mean = b.sum(1, keepdim=True) / cnt
    # The last block's padding zeros stay in its sum of squares (a slightly larger
    # sigma there than the kernels' own): the runs in precision-control.md used this.
    var = ((b - mean) ** 2).sum(1, keepdim=True) / cnt
    m = b.abs().max(1, keepdim=True).values
    s = torch.minimum(m, 2.5 * var.clamp(min=0).sqrt())
    prob = torch.where(s > 0, b.abs().clamp(max=s) / s.clamp(min=1e-30), torch.zeros_like(b))
    prob = torch.minimum(prob, torch.ones_like(prob))
    u = torch.rand(b.shape, generator=gen)
    if U8: u = torch.floor(u * 256) / 256
    out = torch.where(u < prob, torch.sign(b) * s, torch.zeros_like(b))
    return out.view(-1)[:n].view_as(x)

U8 = "--u8" in sys.argv
if U8: sys.argv.remove("--u8")

def twobit(x, gen):
    t = float(x.abs().mean())
    z = torch.zeros_like(x)
    return torch.where(x >= t, z + t, torch.where(x <= -t, z - t, z))

def int8(x, gen):  # 255 levels, scale max|x|/127, round to nearest
    m = float(x.abs().max())
    if m == 0: return torch.zeros_like(x)
    s = m / 127
    return torch.round(x / s).clamp(-127, 127) * s

def onebit(x, gen):  # per 262144-element chunk: 1 -> mean of the x > 0, 0 -> mean of the x < 0
    out = torch.empty_like(x).view(-1); flat = x.reshape(-1)
    for c in range(0, flat.numel(), 262144):
        v = flat[c:c + 262144]; pos = v > 0; neg = v < 0
        hi = float(v[pos].mean()) if pos.any() else 0.0
        lo = float(v[neg].mean()) if neg.any() else 0.0
        bit = torch.where(v == 0, torch.tensor(abs(hi) <= abs(lo)), pos)  # [onebit zeros]
        out[c:c + 262144] = torch.where(bit, torch.tensor(hi), torch.tensor(lo))
    return out.view_as(x)

def fp16(x, gen): return x.half().float()
def none(x, gen): return x.clone()
CODECS = {"ternary": ternary, "twobit": twobit, "onebit": onebit, "int8": int8, "fp16": fp16,
          "none": none, "ternary512": ternary_blocks}

BITS = {"ternary512": 2.0625, "ternary": 2, "twobit": 2, "onebit": 1, "int8": 8, "fp16": 16,
        "none": 32}
# The push controller reads the owed descent <e, g> / |g|^2, not |e| / |g|.
PROJ = "--proj" in sys.argv
if PROJ: sys.argv.remove("--proj")
FLUSH = "--flush" in sys.argv
if FLUSH: sys.argv.remove("--flush")

class Ctl:
    """Per tensor per direction: the error ratio |e| / |signal| after each
    encode. Over `bound`: flush (the next send is exact: residual 0); two
    flushes closer than 3 x bound clocks -> one level up."""
    def __init__(self, ladder, bound, patience, name):
        self.ladder, self.bound, self.patience, self.name = ladder, bound, patience, name
        self.level, self.over = 0, 0
        self.ratio = 0.0
        self.flush_next = False
        self.last_flush = 0
        self.bits = 0.0; self.sends = 0; self.flushes = 0
    @property
    def codec(self): return "none" if self.flush_next else self.ladder[self.level]
    def sent(self):
        self.bits += BITS[self.codec]; self.sends += 1
        if self.flush_next: self.flushes += 1
        self.flush_next = False
    def observe(self, err, sig, step, log):
        r = err / max(sig, 1e-30); self.ratio = r
        if self.bound <= 0: return False
        self.over = self.over + 1 if r > self.bound else 0
        if self.over < self.patience or self.ladder[self.level] == "none": return False
        self.over = 0
        if FLUSH and step - self.last_flush >= 3 * self.bound:  # precision.h
            self.flush_next = True; self.last_flush = step
            return False
        if self.level + 1 < len(self.ladder):
            log.append("step %d %s: %s -> %s, ratio %.2f"
                       % (step, self.name, self.codec, self.ladder[self.level + 1], r))
            self.level += 1
            return True
        return False

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="vit"); ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--push", default="ternary"); ap.add_argument("--pull", default="ternary")
    ap.add_argument("--pull_min", type=int, default=16384)
    ap.add_argument("--push_min", type=int, default=0)
    ap.add_argument("--ladder", default="ternary,fp16,none")
    ap.add_argument("--bound", type=float, default=0)
    ap.add_argument("--patience", type=int, default=1)
    ap.add_argument("--eval_every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--test_limit", type=int, default=10000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--resync", action="store_true", help="pull escalation resets q = p")
    args = ap.parse_args()
    LR = {"widecnn": 0.02, "resnet": 0.05, "vit": 0.02, "lstm": 1.0}
    lr = args.lr or LR[args.model]
    torch.set_num_threads(1); gs.init()
    if args.model == "lstm":
        train, test, classes = T.fortunes(32, args.test_limit)
    else:
        train, test, classes = T.fashion_mnist(args.test_limit)
    torch.manual_seed(args.seed)
    net = T.build(args.model, classes)
    names = [n for n, _ in net.named_parameters()]
    params = list(net.parameters())
    n = len(params)
    p = [x.detach().clone() for x in params]
    v = [torch.zeros_like(x) for x in p]
    prev = [x.clone() for x in p]
    res = [[torch.zeros_like(x) for x in p] for _ in range(args.workers)]
    gen = torch.Generator().manual_seed(123)
    def ladder_from(c):
        lad = args.ladder.split(",")
        return lad[lad.index(c):] if c in lad else [c]
    pull = {i: Ctl(ladder_from(args.pull), args.bound, args.patience, names[i] + " pull")
            for i in range(n) if args.pull != "none" and p[i].numel() >= args.pull_min}
    push = {i: [Ctl(ladder_from(args.push), args.bound, args.patience, names[i] + " push w%d" % w)
                for w in range(args.workers)]
            for i in range(n) if args.push != "none" and p[i].numel() >= args.push_min}
    log = []
    batches = gs.shard(train, global_batch_size=64, steps=args.steps, seed=args.seed)
    evals = []
    step = 0
    t0 = time.time()
    for xb, yb in batches:
        if step >= args.steps: break
        agg = [torch.zeros_like(x) for x in p]
        for w in range(args.workers):
            net.zero_grad()
            T.loss_of(net, xb[w::args.workers], yb[w::args.workers]).backward()
            with torch.no_grad():
                for i, prm in enumerate(params):
                    g = prm.grad
                    if i in push:
                        c = push[i][w]
                        x = g + res[w][i]
                        dec = CODECS[c.codec](x, gen); c.sent()
                        res[w][i] = x - dec
                        gn = float(g.norm()); e = res[w][i]
                        # Clocks of descent owed along g.
                        owed = float((e * g).sum()) / max(gn * gn, 1e-30)
                        if step >= 20:  # mean and max from step 20 on
                            c.owedmax = max(getattr(c, "owedmax", 0.0), owed)
                            c.owedsum = getattr(c, "owedsum", 0.0) + owed
                            c.owedn = getattr(c, "owedn", 0) + 1
                        c.observe(max(owed, 0.0) * gn if PROJ else float(e.norm()), gn, step, log)
                        agg[i] += dec / args.workers
                    else:
                        agg[i] += g / args.workers
        with torch.no_grad():
            for i in range(n):
                v[i].mul_(0.9).add_(agg[i]); p[i].add_(v[i], alpha=-lr)
            for i, prm in enumerate(params):
                q = prm.data
                if i not in pull:
                    q.copy_(p[i]); continue
                c = pull[i]
                q.add_(CODECS[c.codec](p[i] - q, gen)); c.sent()
                err, sig = float((p[i] - q).norm()), float((p[i] - prev[i]).norm())
                if c.observe(err, sig, step, log) and args.resync:
                    q.copy_(p[i])
                prev[i].copy_(p[i])
        step += 1
        if step % args.eval_every == 0 or step == args.steps:
            acc, tl = T.evaluate(net, *test, train[0])
            pr = sorted(c.ratio for c in pull.values()) or [0]
            pu = sorted(c.ratio for cs in push.values() for c in cs) or [0]
            lv = (sum(c.level for c in pull.values()),
                  sum(c.level for cs in push.values() for c in cs))
            allc = list(pull.values()) + [c for cs in push.values() for c in cs]
            bits = (sum(c.bits * p[i].numel() for i, c in pull.items())
                    / max(1, sum(c.sends * p[i].numel() for i, c in pull.items())))
            pbits = (sum(c.bits * p[i].numel() for i, cs in push.items() for c in cs)
                     / max(1, sum(c.sends * p[i].numel() for i, cs in push.items() for c in cs)))
            print("   bits/elem pull %.2f push %.2f flushes %d"
                  % (bits, pbits, sum(c.flushes for c in allc)))
            print("step %d acc %.4f loss %.3f | pull ratio med %.2f max %.2f | push ratio med %.2f"
                  " max %.2f | levels pull %d push %d | %.0fs"
                  % (step, acc, tl, pr[len(pr)//2], pr[-1], pu[len(pu)//2], pu[-1], lv[0], lv[1],
                     time.time() - t0), flush=True)
            evals.append((step, acc))
    for l in log: print(l)
    for i in range(n):
        pu = max((c.ratio for c in push.get(i, [])), default=0)
        pl = max((c.level for c in push.get(i, [])), default=0)
        owed = max((getattr(c, "owedsum", 0) / max(1, getattr(c, "owedn", 0))
                    for c in push.get(i, [])), default=0)
        owedmax = max((getattr(c, "owedmax", 0) for c in push.get(i, [])), default=0)
        print("%-40s %7d push %-8s %6.2f owed mean %6.2f (max %6.2f) | pull %-8s %6.2f"
              % (names[i], p[i].numel(), push[i][0].codec if i in push else "-", pu, owed,
                 owedmax, pull[i].codec if i in pull else "-",
                 pull[i].ratio if i in pull else 0))
    print("FINAL", json.dumps({"args": vars(args), "evals": evals}))

main()
