"""Forwards that read parameters their module does not own, run while the
pull is in flight, for forward_reads_test.py.

The pull follows the pushes, which follow backward: a module's later
tensors (out_proj) arrive before its earlier ones (in_proj), so the
standalone attention's in-projection is frozen (as in fine-tuning): its own
pre-hook has nothing to wait for and its forward reads out_proj at once.

Each clock: right after ps.step(), while the next pull is still arriving
(the test slows every shard's connection), one case's forward runs in one
mode (training with grad, or eval under no_grad: the encoder layer's fast
path); then ps.synchronize() and the same forward again, on the parameters
the step must see. The two outputs must be equal to the bit. Then a full
training step (every case, so every parameter changes). Writes per-check
results as JSON lines to --out/rank<r>.jsonl.
"""

import argparse
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradstream.torch as gs

D, HEADS, FF, VOCAB, T = 48, 4, 96, 100, 6
CASES = ("parent_reads_child", "mha", "encoder", "lstm", "tied")


class Head(nn.Module):
    """Reads its child's weight itself: proj's forward never runs."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(D, D)

    def forward(self, x):
        return torch.tanh(F.linear(x, self.proj.weight, self.proj.bias))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.attn.in_proj_weight.requires_grad_(False)
        self.attn.in_proj_bias.requires_grad_(False)
        self.block = nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.0, batch_first=True)
        self.lstm = nn.LSTM(D, D, batch_first=True)
        self.head = Head()
        self.embed = nn.Embedding(VOCAB, D)
        self.out = nn.Linear(D, VOCAB, bias=False)
        self.out.weight = self.embed.weight  # tied

    def forward(self, x, ids, cases=CASES):
        y = {}
        if "parent_reads_child" in cases:
            y["parent_reads_child"] = self.head(x)
        if "mha" in cases:
            y["mha"] = self.attn(x, x, x, need_weights=False)[0]
        if "encoder" in cases:
            y["encoder"] = self.block(x)
        if "lstm" in cases:
            y["lstm"] = self.lstm(x)[0]
        if "tied" in cases:
            y["tied"] = self.out(self.embed(ids))
        return y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--clocks", type=int, default=24)
    args = ap.parse_args()
    gs.init()
    rank = gs.rank()
    torch.manual_seed(3)
    model = Net()
    g = torch.Generator().manual_seed(50 + rank)
    x = torch.randn(4, T, D, generator=g)
    ids = torch.randint(0, VOCAB, (4, T), generator=g)
    target = torch.randn(4, T, D, generator=g)
    fast_path = [0]
    real_fwd = torch._transformer_encoder_layer_fwd

    def counting(*a, **k):
        fast_path[0] += 1
        return real_fwd(*a, **k)
    torch._transformer_encoder_layer_fwd = counting

    ps = gs.ParameterServer(model)
    log = open(os.path.join(args.out, "rank%d.jsonl" % rank), "w")
    checks = [(case, mode) for mode in ("train", "eval") for case in CASES]
    for clock in range(args.clocks):
        if clock > 0:  # the pull of this clock is in flight
            case, mode = checks[(clock - 1) % len(checks)]
            model.train(mode == "train")
            with torch.set_grad_enabled(mode == "train"):
                fast_before = fast_path[0]
                racing = model(x, ids, (case,))[case].detach().clone()
                ps.synchronize()
                settled = model(x, ids, (case,))[case].detach().clone()
            model.train()
            log.write(json.dumps({
                "clock": clock, "case": case, "mode": mode,
                "equal": bool(torch.equal(racing, settled)),
                "max_diff": float((racing - settled).abs().max()),
                "fast_path": fast_path[0] > fast_before}) + "\n")
            log.flush()
        y = model(x, ids)
        loss = sum(F.mse_loss(v, target) for k, v in y.items() if k != "tied")
        loss = loss + F.cross_entropy(y["tied"].reshape(-1, VOCAB), ids.reshape(-1))
        loss.backward()
        ps.step(loss)
    log.close()


if __name__ == "__main__":
    main()
