#!/usr/bin/python3
"""On paper, past this machine: each system's step at 10 and 100 Gbit/s with
8 to 256 workers, from the bytes per step bench/tta/run.py measured and
published GPU step times.

    bench/tta/paper.py bench/tta/results/<stamp>.json [--model widecnn --rate 1gbit]

NOTE: [paper model] Each system's wire ratio against fp32 comes from the
measured run: r = 4 * params / (bytes a worker's namespace sent per step);
for gradstream push and pull separately (sent: pushes, received: pulls).
Those bytes include TCP/IP and gRPC/gloo framing. A model of M fp32 bytes
on links of B bytes/s:
  all-reduce (ring, n workers):  2 (n - 1) / n * (M / r) / B
  PS, n workers, k shards:       max(1, n / k) * max(M / r_push, M / r_pull) / B
  (a worker sends its push and receives its pull on one full-duplex link;
  a shard receives n / k pushes' worth and sends n / k pulls' worth)
and the step is max(GPU compute, communication): perfect overlap, the
best case for every system alike. Shard CPU (decode, apply, encode) and
latency are left out; so is PowerSGD's ratio's dependence on tensor
shapes (it is the measured model's).
"""

import argparse
import json
import statistics

# Published single-GPU training step times (mixed precision, A100 80GB):
# NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5
# README: 2470 img/s at batch 256 per GPU; its PaddlePaddle BERT README,
# SQuAD fine-tuning, batch 32 per GPU: 120 sequences/s (123 in another
# revision of that README).
WORKLOADS = [
    ("ResNet-50 (25.6M params, batch 256/GPU)", 25.6e6, 256 / 2470),
    ("BERT-large (336M params, batch 32/GPU)", 336e6, 32 / 120),
]
WORKERS = (8, 32, 256)
GBITS = (10, 100)


def ratios(runs, model, rate):
    out = {}
    for r in runs:
        if r["model"] != model or r["rate"] != rate or r["status"] != "ok":
            continue
        m = 4.0 * r["params"]
        tx = statistics.mean(x[0] for x in r["script_tx_rx_per_step"])
        rx = statistics.mean(x[1] for x in r["script_tx_rx_per_step"])
        if not tx or not rx:   # single-process references send nothing
            continue
        push, pull = (m / tx, m / rx) if r["system"].startswith("gs-") else (m / tx, m / tx)
        out.setdefault(r["system"], []).append((push, pull))
    return {s: (statistics.median(p for p, _ in v), statistics.median(q for _, q in v))
            for s, v in out.items()}


def comm_s(system, m_bytes, push, pull, n, gbit, shards):
    b = gbit * 1e9 / 8
    if system.startswith("ddp-"):
        return 2 * (n - 1) / n * (m_bytes / push) / b
    return max(1.0, n / shards) * max(m_bytes / push, m_bytes / pull) / b


def table(r, shards_per_worker=1.0):
    lines = []
    for name, params, compute in WORKLOADS:
        m = 4 * params
        lines += ["", "%s: GPU step %.0f ms; step time in ms (communication alone in "
                  "brackets), k = %s shards" % (name, 1000 * compute,
                                                "n" if shards_per_worker == 1 else
                                                "%g n" % shards_per_worker), "",
                  "| system | wire ratio push/pull | " + " | ".join(
                      "n=%d %dG" % (n, g) for g in GBITS for n in WORKERS) + " |",
                  "|---|---|" + "---|" * (len(GBITS) * len(WORKERS))]
        for system, (push, pull) in r.items():
            cells = []
            for g in GBITS:
                for n in WORKERS:
                    c = comm_s(system, m, push, pull, n, g, max(1, n * shards_per_worker))
                    cells.append("%.0f (%.0f)" % (1000 * max(compute, c), 1000 * c))
            lines.append("| %s | %.1f / %.1f | %s |" % (system, push, pull, " | ".join(cells)))
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+")
    ap.add_argument("--model", default="widecnn")
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--shards_per_worker", type=float, default=1.0,
                    help="k / n: 1 = a shard beside every worker; 0.125 = one per 8 workers")
    args = ap.parse_args()
    runs = [r for f in args.results for r in json.load(open(f))["runs"]]
    r = ratios(runs, args.model, args.rate)
    print("\n".join(table(r, args.shards_per_worker)))


if __name__ == "__main__":
    main()
