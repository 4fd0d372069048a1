#!/usr/bin/env python3
"""Prints the GPU check's one report from the files run.sh left in OUTDIR.

    report.py OUTDIR

Reads device.txt, steps.txt, <test>.log, bench.json and training_gpu_test.log;
standard library only.
"""
import json
import os
import re
import sys


def read(path, default=""):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return default


def gtest_summary(log):
    ran = re.search(r"\[==========\] (\d+) tests? from .* ran", log)
    passed = re.search(r"\[  PASSED  \] (\d+) test", log)
    skipped = re.search(r"\[  SKIPPED \] (\d+) test", log)
    failed = re.search(r"\[  FAILED  \] (\d+) test", log)
    skips = sorted(set(re.findall(r": Skipped\n(.+)", log)))
    return {
        "ran": int(ran.group(1)) if ran else 0,
        "passed": int(passed.group(1)) if passed else 0,
        "skipped": int(skipped.group(1)) if skipped else 0,
        "failed": int(failed.group(1)) if failed else 0,
        "skip_messages": skips,
    }


def main():
    out = sys.argv[1]
    lines = []
    device = read(os.path.join(out, "device.txt")).strip() or "unknown device"
    lines.append(f"gradstream GPU check on {device}")
    steps = {}
    for line in read(os.path.join(out, "steps.txt")).splitlines():
        name, rc, secs = line.split()
        steps[name] = (int(rc), int(secs))

    lines.append("\nTests")
    for name in ("codec_cuda_test", "worker_model_gpu_test", "device_pusher_test",
                 "training_gpu_test"):
        if name not in steps:  # left out (run.sh STEP...)
            continue
        rc, secs = steps[name]
        s = gtest_summary(read(os.path.join(out, name + ".log")))
        verdict = "PASS" if rc == 0 and s["failed"] == 0 else f"FAIL (exit {rc})"
        lines.append(f"  {name:24s} {verdict:18s} {s['passed']} passed, {s['skipped']} skipped,"
                     f" {s['failed']} failed, {secs} s")
        for m in s["skip_messages"]:
            lines.append(f"    skip: {m}")
    for name in ("torch_exactness_cuda_test", "torch_cuda_train_test"):
        if name not in steps:
            continue
        rc, secs = steps[name]
        verdict = {0: "PASS", 77: "SKIP (torch sees no GPU)"}.get(rc, f"FAIL (exit {rc})")
        lines.append(f"  {name:24s} {verdict:18s} {secs} s")
        for line in read(os.path.join(out, name + ".log")).splitlines():
            if line.startswith(("sgd", "momentum", "adagrad", "rank", "largest", "FAIL",
                                "AssertionError")):
                lines.append(f"    {line[:160]}")
    if "cpu_tests" in steps:
        rc, _ = steps["cpu_tests"]
        lines.append(f"  {'CPU tests (run_cpu_tests.sh)':24s} {'PASS' if rc == 0 else 'FAIL'}")

    lines.append("\nGPU codec benchmark: fp32 GB/s and x_d2d = median over pairs of"
                 " (device-to-device cudaMemcpy time / op time); goal x_d2d >= 0.7")
    lines.append(f"  {'operation':22s} {'codec':8s} {'elements':>10s} {'GB/s':>9s} {'x_d2d':>7s}")
    try:
        bench = json.loads(read(os.path.join(out, "bench.json"), "{}"))
    except json.JSONDecodeError:
        bench = {}
    for b in bench.get("benchmarks", []):
        m = re.match(r"BM_Gpu(\w+)/codec:(\d)/n:(\d+)", b.get("name", ""))
        if not m:
            continue
        op = {"EncodeResidual": "encode with residual",
              "EncodeResidualAsync": "encode, async header",
              "DecodeAdd": "decode-accumulate"}.get(m.group(1), m.group(1))
        codec = b.get("label", "?").replace(" (gpu)", "")
        lines.append(f"  {op:22s} {codec:8s} {int(m.group(3)):>10d} {b.get('GB/s', 0):9.1f}"
                     f" {b.get('x_d2d', 0):7.2f}")
    if not bench.get("benchmarks"):
        lines.append("  (no benchmark output; see codec_benchmark.log)")

    lines.append("\nTraining: CNN on synthetic 28x28 images, coordinator + 2 shards + 2 workers"
                 " (sharing the GPU), 300 steps, batch 32, twobit with a fixed threshold;"
                 " -defaults: the job's default codec")
    jobs = {}
    for m in re.finditer(r"GS_REPORT (\S+) accuracy=(\S+) samples_per_sec=(\S+)"
                         r" encode_path=(\S*) encode_share=(\S+)",
                         read(os.path.join(out, "training_gpu_test.log"))):
        jobs[m.group(1)] = {"accuracy": float(m.group(2)), "sps": float(m.group(3)),
                            "path": m.group(4), "share": float(m.group(5))}
    lines.append(f"  {'job':31s} {'accuracy':>8s} {'samples/s':>10s} {'encode':>7s}"
                 f" {'share of step encoding+copying':>31s}")
    for name, j in jobs.items():
        lines.append(f"  {name:31s} {j['accuracy']:8.4f} {j['sps']:10.0f} {j['path']:>7s}"
                     f" {100 * j['share']:30.2f}%")
    cpu, dev, host = (jobs.get(k) for k in ("cnn-cpu", "cnn-gpu-device-encode",
                                            "cnn-gpu-host-encode"))
    if cpu and dev and cpu["sps"] > 0:
        lines.append(f"  samples/s GPU (device encode) / CPU: {dev['sps'] / cpu['sps']:.2f}x")
    if dev and host:
        lines.append(f"  share of a step encoding and copying: device path"
                     f" {100 * dev['share']:.2f}%, host path {100 * host['share']:.2f}%")
    if not jobs:
        lines.append("  (no training output; see training_gpu_test.log)")
    bad = [n for n, (rc, _) in steps.items() if rc != 0]
    lines.append("\nResult: " + ("PASS" if not bad else "FAIL in " + ", ".join(bad)))
    if "no CUDA device is present" in read(os.path.join(out, "codec_cuda_test.log")):
        lines.append("WARNING: the GPU tests skipped: no CUDA device was visible")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
