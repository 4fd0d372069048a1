#!/usr/bin/env python3
"""The all-reduce a PyTorch user would run instead of a parameter server:
torch.distributed.all_reduce (gloo) of one fp32 tensor, timed per call.

Run once per rank (bench/netns_shaped.sh starts rank 0 beside the shard and
rank 1 beside the worker, across the shaped link):

  allreduce_gloo.py --rank=0 --world=2 --master=10.213.77.1:29512 --floats=16777216 --reps=3

Rank 0 prints one line: "allreduce <floats> floats: median <ms> ms over <n> (ms: ...)".
"""
import argparse
import datetime
import statistics
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--master", required=True, help="host:port of rank 0's rendezvous")
    ap.add_argument("--floats", type=int, default=16 << 20)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()
    host, port = args.master.rsplit(":", 1)
    timeout = datetime.timedelta(seconds=120)
    store = dist.TCPStore(host, int(port), args.world, args.rank == 0, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=args.rank, world_size=args.world,
                            timeout=timeout)
    t = torch.randn(args.floats, generator=torch.Generator().manual_seed(args.rank))
    times = []
    for i in range(args.warmup + args.reps):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(t)
        took = time.perf_counter() - start
        if i >= args.warmup:
            times.append(took * 1e3)
    if args.rank == 0:
        print("allreduce %d floats: median %.1f ms over %d (ms: %s)" %
              (args.floats, statistics.median(times), len(times),
               " ".join("%.1f" % x for x in times)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
