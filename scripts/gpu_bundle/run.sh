#!/usr/bin/env bash
# The one command for a GPU machine, run from the bundle scripts/gpu_check.sh
# built (it needs only the NVIDIA driver, cuBLAS and cuDNN 9 there, e.g. from
# PyTorch's CUDA wheels, and python3 for the report):
#   gpu-bundle/run.sh [STEP...]
# 1. the GPU tests (device codecs byte for byte against the CPU's, GPU models
#    against the CPU path, the device encode path's residual invariant);
# 2. the GPU codec benchmark (encode with residual and decode-accumulate,
#    paired with a device-to-device cudaMemcpy);
# 3. training on a local cluster (coordinator, 2 shards, 2 workers sharing
#    the GPU): the CNN with device encoding, with host encoding, and on CPU;
# 4. the package with the model on the GPU (torch's CUDA tensors): exactness
#    against a reference on the GPU, and a CNN trained with the defaults;
# 5. the CPU tests;
# then prints one report. Named STEPs (codec_cuda_test, codec_benchmark, ...,
# cpu_tests: the names in the report) run alone, to re-check a change
# within a short lease. Into $OUT (or ./gpu-out/) go two files only, as
# the device tool returns few: report.txt and gpu-check-logs.tgz (every log,
# bench.json). Exit status 0 when every step passed.
set -uo pipefail
B=$(cd "$(dirname "$0")" && pwd)
DEST=${OUT:-$PWD/gpu-out}
mkdir -p "$DEST"
OUTDIR=$(mktemp -d "${TMPDIR:-/tmp}/gs-gpu-check.XXXXXX")

# cuBLAS and cuDNN: the toolkit's, the system's or a Python wheel's.
libdirs=""
candidates="/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu"
if command -v python3 >/dev/null; then
  candidates="$candidates $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)"
fi
for lib in libcublas.so.13 libcublasLt.so.13 libcudnn.so.9; do
  # -L: lib64 is often a link (lib64 -> lib).
  found=$(find -L $candidates -maxdepth 5 -name "$lib" 2>/dev/null | head -1)
  if [ -z "$found" ]; then
    echo "run.sh: $lib not found in $candidates" | tee "$OUTDIR/missing.txt"
    continue
  fi
  case ":$libdirs:" in *":$(dirname "$found"):"*) ;; *) libdirs="$libdirs:$(dirname "$found")" ;; esac
done
export LD_LIBRARY_PATH="$B/lib$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "run.sh: LD_LIBRARY_PATH=$LD_LIBRARY_PATH" > "$OUTDIR/env.txt"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    > "$OUTDIR/device.txt" 2>&1
else
  echo "no nvidia-smi on this machine" > "$OUTDIR/device.txt"
fi

ONLY=" $* "
step() {  # step NAME TIMEOUT_S COMMAND...: runs, logs to $OUTDIR/NAME.log, records the exit code
  local name=$1 limit=$2
  shift 2
  if [ "$ONLY" != "  " ] && [[ $ONLY != *" $name "* ]]; then return; fi
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUTDIR/$name.log" 2>&1
  local rc=$?
  echo "$name $rc $((SECONDS - t0))" >> "$OUTDIR/steps.txt"
  echo "run.sh: $name exit $rc ($((SECONDS - t0)) s)" >&2
}
: > "$OUTDIR/steps.txt"
step codec_cuda_test 180 "$B/tests/codec_cuda_test"
step worker_model_gpu_test 180 "$B/tests/worker_model_gpu_test"
step device_pusher_test 180 "$B/tests/device_pusher_test"
step codec_benchmark 180 "$B/tests/codec_benchmark" --benchmark_filter='^BM_Gpu' \
  --benchmark_min_time=0.2 --benchmark_format=json "--benchmark_out=$OUTDIR/bench.json"
step training_gpu_test 480 env GS_BIN_DIR="$B/bin" "$B/tests/training_gpu_test"
# The package's tests want a build tree: the binaries where CMake puts them,
# python/ beside them (gs_worker finds the package from its own path).
T=$OUTDIR/tree
mkdir -p "$T/server/shard" "$T/server/coordinator" "$T/worker/trainer" "$T/cli"
cp "$B/bin/gs_shard" "$T/server/shard/"; cp "$B/bin/gs_coordinator" "$T/server/coordinator/"
cp "$B/bin/gs_worker" "$T/worker/trainer/"; cp "$B/bin/gradstream" "$T/cli/"
cp -r "$B/python" "$T/python"
for t in exactness_cuda:exactness_test cuda_train:cuda_train_test; do
  step "torch_${t%%:*}_test" 300 python3 "$B/tests/torch/${t#*:}.py" --build "$T" --device cuda
done
step cpu_tests 120 "$B/run_cpu_tests.sh"

python3 "$B/report.py" "$OUTDIR" | tee "$DEST/report.txt"
tar czf "$DEST/gpu-check-logs.tgz" -C "$OUTDIR" .
! awk '$2 != 0 {bad = 1} END {exit !bad}' "$OUTDIR/steps.txt"
