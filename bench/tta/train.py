#!/usr/bin/env python3
"""One training script for the time-to-accuracy benchmark (bench/tta/run.py),
shared by PyTorch DDP and gradstream so that both train the same model from
the same seeded initialization on the same samples per step.

    --system ddp         one rank of torch DDP (gloo; env rendezvous from
                         --master/--rank/--world); --ddp_hook fp32|fp16|
                         powersgd|batched_powersgd picks the comm hook.
    --system gradstream  run by gs_worker (`gradstream submit --entrypoint`):
                         the package's public API only (gs.init,
                         gs.ParameterServer, gs.shard, ps.step, ps.report,
                         ps.stats); the optimizer runs on the shards.
    --system local       single process, no network (the package's local
                         mode: the same momentum-SGD formula).

Models (--model), written the way users write them: `widecnn` (two convs,
then Linear layers 2048 wide: 6.4M parameters), `resnet` (a small ResNet
with BatchNorm) and `vit` (a small vision transformer of
nn.TransformerEncoderLayer blocks) on Fashion-MNIST; `lstm` (a character LSTM) on the text of
Debian's `fortunes` package, reporting next-character accuracy and
perplexity; `ctr` (a click-through model: one embedding table over 8 hashed
categorical fields with power-law ids, an MLP on top) on data drawn from a
planted model, reporting test AUC in the accuracy column. gradstream's
table is a gs.Embedding (rows on the shards, docs/design/sparse-tables.md);
DDP's and local's an nn.Embedding(sparse=True), trained with torch's
AdaGrad (the job's --optimizer adagrad: the same lazy per-row update).

NOTE: [same samples] The global batch (--global_batch) is split across the
2 ranks exactly as gs.shard(..., global_batch_size=B) splits it: rank r takes
every world_size-th index of each global batch. DDP ranks draw the global
batch through gs.shard in local mode (world size 1, the same permutation a
job's first membership epoch draws) and slice [rank::world], so DDP's
averaged gradient is the average the shards compute.

Rank 0 evaluates every --eval_every steps (and at step 0 and the last step),
outside the timed step, and rewrites --out (JSON) after each evaluation, so
a run that is killed at its deadline leaves what it reached. Every rank
writes its own --out.rankN with its step times, CPU seconds (getrusage,
evaluations excluded) and its namespace's interface bytes over the loop.
"""

import argparse
import importlib.util
import json
import math
import os
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradstream.torch as gs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FMNIST = "/usr/share/datasets/fashion-mnist"
FORTUNES = "/usr/share/games/fortunes"


# -- data

def example(name):
    """examples/<name>/train.py as a module: its reader and blocks are used
    as they are (one piece of code for one job)."""
    spec = importlib.util.spec_from_file_location(
        name + "_example", os.path.join(REPO, "examples", name, "train.py"))
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    return ex


def fashion_mnist(test_limit):
    ex = example("fashion_mnist")
    x, y = ex.load(FMNIST, "train")
    tx, ty = ex.load(FMNIST, "test")
    return (x, y), (tx[:test_limit], ty[:test_limit]), 10


# The click-through family: --ctr_rows table rows, CTR_FIELDS fields of
# --ctr_rows / CTR_FIELDS ids each, drawn from a power law.
CTR_FIELDS = 8
CTR_DIM = 16
CTR_INIT_STD = 0.05


def ctr_data(rows, test_limit, train_size=200_000, seed=12345):
    """Samples of a planted model: field f's ids are row f * V + k with k
    drawn from p(k) ~ (k + 1)^-1.1 (V = rows / fields); each row has a
    planted 4-vector w and each field a planted 4-vector u, and a sample's
    label is 1 with probability sigmoid(sum_f <u_f, w[id_f]> - 1). Returns
    (ids, labels) for training and testing and the AUC of the planted
    probabilities on the test set: the best any model can reach. Rows past
    the first 2^20 of a field share their planted vector with row k mod
    2^20 (a table of any size, planted without allocating it)."""
    g = torch.Generator().manual_seed(seed)
    v = rows // CTR_FIELDS
    planted = min(v, 1 << 20)
    p = torch.arange(1, v + 1, dtype=torch.float64).pow(-1.1)
    w = torch.randn(CTR_FIELDS, planted, 4, generator=g)
    u = torch.randn(CTR_FIELDS, 4, generator=g)

    def draw(n):
        k = torch.multinomial(p.float(), n * CTR_FIELDS, replacement=True, generator=g)
        k = k.view(n, CTR_FIELDS)
        ids = k + torch.arange(CTR_FIELDS) * v
        logit = (w[torch.arange(CTR_FIELDS), k % planted] * u).sum((1, 2)) - 1.0
        prob = torch.sigmoid(logit)
        return ids, torch.bernoulli(prob, generator=g), prob

    train_ids, train_y, _ = draw(train_size)
    test_ids, test_y, test_p = draw(test_limit)
    return (train_ids, train_y), (test_ids, test_y), auc(test_p, test_y)


def auc(score, label):
    """Area under the ROC curve (ranks; ties broken by order)."""
    order = torch.argsort(score)
    ranks = torch.empty_like(order, dtype=torch.float64)
    ranks[order] = torch.arange(1, len(score) + 1, dtype=torch.float64)
    pos = label > 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    return ((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)).item()


class LocalRows(nn.Module):
    """A gradstream job's table with its rows on the worker (timing only):
    what gs.Embedding does on the worker -- the batch's unique ids, their
    rows as a leaf, the lookup, their gradients -- and a local AdaGrad
    update of those rows (each worker its own copy, never synchronized), in
    place of the pulls, the pushes and the shards' update."""

    def __init__(self, rows, dim, std):
        super().__init__()
        self.register_buffer("weight", torch.randn(rows, dim) * std)
        self.register_buffer("acc", torch.full((rows, dim), 0.1))
        self.last = None

    def forward(self, ids):
        uniq, inverse = torch.unique(ids.reshape(-1), sorted=True, return_inverse=True)
        rows = self.weight[uniq].requires_grad_(True)
        self.last = (uniq, rows)
        return F.embedding(inverse.view(ids.shape), rows)

    @torch.no_grad()
    def update(self, lr):
        uniq, rows = self.last
        g = rows.grad
        acc = self.acc[uniq] + g * g
        self.acc[uniq] = acc
        self.weight[uniq] -= lr * g / (acc.sqrt() + 1e-7)


class CTR(nn.Module):
    """Embeddings of the fields' ids, concatenated, into an MLP of 64."""

    def __init__(self, rows, on_shards, sparse=True, local_rows=False):
        super().__init__()
        if local_rows:  # --ctr_table local: timing only
            self.table = LocalRows(rows, CTR_DIM, CTR_INIT_STD)
        elif on_shards:
            self.table = gs.Embedding(rows, CTR_DIM, init_std=CTR_INIT_STD)
        else:
            self.table = nn.Embedding(rows, CTR_DIM, sparse=sparse)
            nn.init.normal_(self.table.weight, std=CTR_INIT_STD)
        self.mlp = nn.Sequential(nn.Linear(CTR_FIELDS * CTR_DIM, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, ids):
        return self.mlp(self.table(ids).reshape(len(ids), -1)).squeeze(1)


def fortune_text():
    """Every English fortune file of the fortunes package, concatenated."""
    names = sorted(n for n in os.listdir(FORTUNES)
                   if "." not in n and n not in ("ascii-art", "art") and
                   os.path.isfile(os.path.join(FORTUNES, n)) and
                   not os.path.islink(os.path.join(FORTUNES, n)))
    if not names:
        raise FileNotFoundError("no fortune files in %s (apt-get install fortunes)" % FORTUNES)
    return b"".join(open(os.path.join(FORTUNES, n), "rb").read() for n in names)


def fortunes(seq_len, test_limit):
    """The fortunes package's English text as bytes, windows of seq_len + 1
    characters: the last 10% of the text is the test set."""
    text = fortune_text()
    vocab = sorted(set(text))
    lut = torch.zeros(256, dtype=torch.long)
    lut[torch.tensor(vocab)] = torch.arange(len(vocab))
    ids = lut[torch.frombuffer(bytearray(text), dtype=torch.uint8).long()]
    cut = int(len(ids) * 0.9)

    def windows(t):
        n = (len(t) - 1) // seq_len
        return t[:n * seq_len].view(n, seq_len), t[1:n * seq_len + 1].view(n, seq_len)
    test = windows(ids[cut:])
    return windows(ids[:cut]), (test[0][:test_limit], test[1][:test_limit]), len(vocab)


def fortune_words(seq_len, test_limit, vocab=8000):
    """The fortunes text as words (lower-cased runs of letters and
    apostrophes), the `vocab` - 1 most frequent kept and the rest one
    unknown id; windows of seq_len + 1 words, the last 10% the test set."""
    import collections
    import re
    text = fortune_text().decode("latin-1").lower()
    words = re.findall(r"[a-z']+", text)
    counts = collections.Counter(words)
    ids = {w: i + 1 for i, (w, _) in enumerate(counts.most_common(vocab - 1))}
    t = torch.tensor([ids.get(w, 0) for w in words], dtype=torch.long)
    cut = int(len(t) * 0.9)

    def windows(t):
        n = (len(t) - 1) // seq_len
        return t[:n * seq_len].view(n, seq_len), t[1:n * seq_len + 1].view(n, seq_len)
    test = windows(t[cut:])
    return windows(t[:cut]), (test[0][:test_limit], test[1][:test_limit]), vocab


# -- models

class WideCNN(nn.Module):
    """A few convolutions, then a fully connected head thousands wide."""

    def __init__(self, width=2048):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5)
        self.conv2 = nn.Conv2d(32, 64, 5)
        self.fc1 = nn.Linear(64 * 4 * 4, width)
        self.fc2 = nn.Linear(width, width)
        self.fc3 = nn.Linear(width, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc3(F.relu(self.fc2(x)))


class ResNet(nn.Module):
    """ResNet-8 style: a stem and three stages of one basic block each (the
    resnet_synthetic example's Block), for 1-channel images."""

    def __init__(self, widths=(16, 32, 64)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, widths[0], 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU())
        blocks, cin = [], widths[0]
        for i, w in enumerate(widths):
            blocks.append(example("resnet_synthetic").Block(cin, w, 1 if i == 0 else 2))
            cin = w
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, 10)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class ViT(nn.Module):
    """A small vision transformer: 7x7 patches of the 28x28 image, a class
    token, pre-norm nn.TransformerEncoderLayer blocks, a linear head
    (0.45M parameters in 56 tensors)."""

    def __init__(self, dim=96, depth=4, heads=4, patch=7):
        super().__init__()
        self.patch = patch
        self.embed = nn.Linear(patch * patch, dim)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, (28 // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[
            nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True)
            for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        p = self.patch
        x = x.unfold(2, p, p).unfold(3, p, p).reshape(x.shape[0], -1, p * p)
        x = self.embed(x)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


class CharLSTM(nn.Module):
    def __init__(self, vocab, embed=32, hidden=256):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x):
        return self.head(self.lstm(self.embed(x))[0])


class WordLM(nn.Module):
    """A word-level language model whose largest tensor is its embedding
    table: embeddings (vocab x 64), a GRU of 128, an output layer tied to the
    embedding (through a projection to 64)."""

    def __init__(self, vocab, embed=64, hidden=128):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.rnn = nn.GRU(embed, hidden, batch_first=True)
        self.proj = nn.Linear(hidden, embed)
        self.out = nn.Linear(embed, vocab)
        self.out.weight = self.embed.weight

    def forward(self, x):
        return self.out(self.proj(self.rnn(self.embed(x))[0]))


def build(model, classes, args=None):
    if model == "ctr":
        return CTR(args.ctr_rows, on_shards=args.system == "gradstream",
                   sparse=bool(args.ctr_sparse), local_rows=args.ctr_table == "local")
    if model == "widecnn":
        return WideCNN()
    if model == "resnet":
        return ResNet()
    if model == "vit":
        return ViT()
    if model == "wordlm":
        return WordLM(classes)
    return CharLSTM(classes)


def loss_of(net, xb, yb):
    out = net(xb)
    if out.dim() == 1:  # ctr: one logit per sample
        return F.binary_cross_entropy_with_logits(out, yb)
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), yb.reshape(-1))


@torch.no_grad()
def recompute_batchnorm(net, x, batches=8, batch=64):
    """NOTE: [eval batchnorm] BatchNorm's running statistics are buffers
    that trail the parameters (momentum 0.1 over 32-sample batches); early in
    training, with the parameters moving fast, evaluating with them made the
    ResNet's test accuracy swing by 20-30 points between neighbouring
    evaluations and between runs that differ only in rounding (DDP fp32
    against fp16), while the training loss agreed. So before each
    evaluation they are recomputed from the current parameters over the
    same fixed training samples (a cumulative average, as NOTE [buffers] in
    python/gradstream/parameter_server.py describes): the accuracy is then a function
    of the parameters alone, the same for DDP and gradstream."""
    bns = [m for m in net.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    net.train()
    for i in range(batches):
        net(x[i * batch:(i + 1) * batch])
    for m in bns:
        m.momentum = 0.1


@torch.no_grad()
def evaluate(net, x, y, train_x):
    """(accuracy, mean cross-entropy) on the test set; for the LM accuracy is
    per next character and exp(loss) the perplexity."""
    recompute_batchnorm(net, train_x)
    net.eval()
    if isinstance(net, CTR):  # (test AUC, mean log loss)
        score = torch.cat([net(x[i:i + 2000]) for i in range(0, len(x), 2000)])
        net.train()
        return auc(score, y), F.binary_cross_entropy_with_logits(score, y).item()
    correct = total = 0
    loss = 0.0
    for i in range(0, len(x), 500):
        out = net(x[i:i + 500])
        out, t = out.reshape(-1, out.shape[-1]), y[i:i + 500].reshape(-1)
        correct += (out.argmax(1) == t).sum().item()
        loss += F.cross_entropy(out, t, reduction="sum").item()
        total += t.numel()
    net.train()
    return correct / total, loss / total


# -- DDP

def ddp_wrap(net, args):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo", init_method="tcp://" + args.master, rank=args.rank,
                            world_size=args.world)
    ddp = DDP(net)
    if args.ddp_hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif args.ddp_hook in ("powersgd", "batched_powersgd"):
        from powersgd_gloo import register
        register(ddp, args.ddp_hook, args.powersgd_rank)
    return ddp


def ddp_batches(data, args):
    """This rank's share of each global batch: see [same samples]."""
    while True:
        for xb, yb in gs.shard(data, global_batch_size=args.global_batch, seed=args.seed):
            yield xb[args.rank::args.world], yb[args.rank::args.world]


# -- measurement

def rss_mb():
    """This process's resident memory now, MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def net_bytes():
    """tx + rx bytes of this namespace's interfaces (all but loopback); the
    same count for DDP and gradstream."""
    tx = rx = 0
    for dev in os.listdir("/sys/class/net"):
        if dev == "lo":
            continue
        base = os.path.join("/sys/class/net", dev, "statistics")
        tx += int(open(os.path.join(base, "tx_bytes")).read())
        rx += int(open(os.path.join(base, "rx_bytes")).read())
    return tx, rx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--system", choices=("ddp", "gradstream", "local"), required=True)
    ap.add_argument("--model", choices=("widecnn", "resnet", "vit", "lstm", "wordlm", "ctr"),
                    default="widecnn")
    ap.add_argument("--ctr_rows", type=int, default=1 << 20, help="ctr: table rows")
    ap.add_argument("--ctr_table", choices=("shards", "local"), default="shards",
                    help="ctr, gradstream: local = the rows on every worker, updated there "
                         "and never synchronized (timing only)")
    ap.add_argument("--ctr_sparse", type=int, default=1,
                    help="ctr, DDP and local: 1 = nn.Embedding(sparse=True), 0 = dense gradients")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--global_batch", type=int, default=64)
    ap.add_argument("--eval_every", type=int, default=25)
    ap.add_argument("--test_limit", type=int, default=10000,
                    help="test images (vision) / test windows (LM) evaluated")
    ap.add_argument("--seq_len", type=int, default=32, help="LM: characters per sample")
    ap.add_argument("--lr", type=float, default=0.02, help="DDP and local; a job's is submit --lr")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process")
    ap.add_argument("--ddp_hook", default="fp32",
                    choices=("fp32", "fp16", "powersgd", "batched_powersgd"))
    ap.add_argument("--powersgd_rank", type=int, default=4)
    ap.add_argument("--master", default="127.0.0.1:29500", help="DDP: rank 0's HOST:PORT")
    ap.add_argument("--rank", type=int, default=0, help="DDP rank")
    ap.add_argument("--world", type=int, default=1, help="DDP world size")
    ap.add_argument("--out", required=True, help="rank 0's result JSON; rank r adds .rank<r>")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    if args.model == "lstm":
        train, test, classes = fortunes(args.seq_len, args.test_limit)
    elif args.model == "wordlm":
        train, test, classes = fortune_words(args.seq_len // 2, args.test_limit)
    elif args.model == "ctr":
        train, test, classes = ctr_data(args.ctr_rows, args.test_limit)
    else:
        train, test, classes = fashion_mnist(args.test_limit)
    gs.init()
    torch.manual_seed(args.seed)
    net = build(args.model, classes, args)
    params = sum(p.numel() for p in net.parameters())
    if args.model == "ctr":
        params = args.ctr_rows * CTR_DIM + sum(p.numel() for p in net.mlp.parameters())

    if args.system == "gradstream":
        ps = gs.ParameterServer(net)
        rank = gs.rank()
        batches = gs.shard(train, global_batch_size=args.global_batch, steps=args.steps,
                           seed=args.seed)
        fwd = net
    else:
        ps = None
        rank = args.rank if args.system == "ddp" else 0
        if args.system == "local":
            args.world, args.rank = 1, 0
        fwd = ddp_wrap(net, args) if args.system == "ddp" else net
        if args.model == "ctr":  # sparse gradients: the job's --optimizer adagrad
            opt = torch.optim.Adagrad(net.parameters(), lr=args.lr,
                                      initial_accumulator_value=0.1, eps=1e-7)
        else:
            opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)
        batches = ddp_batches(train, args)

    out = args.out if rank == 0 else "%s.rank%d" % (args.out, rank)
    result = {"system": args.system, "model": args.model, "rank": rank, "params": params,
              "steps_wanted": args.steps, "global_batch": args.global_batch,
              "ddp_hook": args.ddp_hook if args.system == "ddp" else None,
              "step_s": [], "phase_s": {"forward": [], "backward": [], "update": []},
              "evals": []}
    if args.model == "ctr":
        result["best_auc"] = classes  # the planted model's

    def write():
        tmp = out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f)
        os.replace(tmp, out)

    train_s = 0.0   # wall-clock of the timed steps, evaluations excluded
    eval_cpu = 0.0

    def perplexity(test_loss):
        # A diverged run's loss (hundreds of nats) is recorded, not a crash.
        return math.exp(test_loss) if test_loss < 700 else float("inf")

    def evaluation(step, loss):
        nonlocal eval_cpu
        c = cpu_s()
        acc, test_loss = evaluate(net, *test, train[0])
        eval_cpu += cpu_s() - c
        if ps is not None:
            ps.report(acc)
        result["evals"].append({"step": step, "train_s": train_s, "accuracy": acc,
                                "test_loss": test_loss, "perplexity": perplexity(test_loss),
                                "train_loss": loss, "rss_mb": rss_mb()})
        print("%s %s step %d: train %.1fs, test accuracy %.4f, loss %.4f" %
              (args.system, args.model, step, train_s, acc, test_loss), flush=True)

    if rank == 0:
        evaluation(0, None)
        write()
    # The loop's CPU leaves out the evaluations inside it, not the one above.
    eval_cpu = 0.0
    cpu0, (tx0, rx0) = cpu_s(), net_bytes()
    step = 0
    while step < args.steps:
        t0 = time.perf_counter()
        try:
            xb, yb = next(batches)
        except StopIteration:
            break
        t1 = time.perf_counter()
        loss = loss_of(fwd, xb, yb)
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        if ps is not None:
            ps.step(loss)
            if isinstance(getattr(net, "table", None), LocalRows):
                net.table.update(args.lr)
        else:
            opt.step()
            opt.zero_grad(set_to_none=True)
        step += 1
        dt = time.perf_counter() - t0
        train_s += dt
        result["step_s"].append(dt)
        for phase, secs in (("forward", t2 - t1), ("backward", t3 - t2),
                            ("update", t0 + dt - t3)):
            result["phase_s"][phase].append(secs)
        if rank == 0 and (step % args.eval_every == 0 or step == args.steps):
            evaluation(step, loss.item())
            write()
    tx1, rx1 = net_bytes()
    result.update(steps=step, train_s=train_s, cpu_s=cpu_s() - cpu0 - eval_cpu,
                  net_tx=tx1 - tx0, net_rx=rx1 - rx0, rss_mb=rss_mb(),
                  max_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)
    if ps is not None:
        result["ps_stats"] = ps.stats()
    write()
    if args.system == "ddp":
        import torch.distributed as dist
        dist.barrier()   # rank 0's last evaluation must not see rank 1 gone
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
