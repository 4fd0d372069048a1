#!/bin/bash
# The built-in CPU models against TorchScript through libtorch (README.md
# here): saves the TorchScript modules from the built-in's
# own layer lists, runs model_runtime_bench's paired rounds with the BLAS
# that libtorch finds (Debian's default: the reference libblas3), again with
# OpenBLAS when OPENBLAS_DIR names a folder holding its libblas.so.3, and
# model_runtime_bench_v3 (the built-in compiled for x86-64-v3) against the
# better of the two when it was built; then times start-up (gs_worker
# against the bench with libtorch loaded, in paired runs) and prints what
# libtorch adds to a binary.
#
#   bench/models/compare.sh [ROUNDS] [bench flags...]
#   OPENBLAS_DIR=/path/to/openblas-pthread bench/models/compare.sh 7
#
# Everything runs at nice 19: other work on the machine is expected.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
BENCH=$BUILD/bench/models/model_runtime_bench
WORKER=$BUILD/worker/trainer/gs_worker
ROUNDS=${1:-5}
shift || true
for bin in "$BENCH" "$WORKER"; do
  if [[ ! -x $bin ]]; then
    echo "compare.sh: $bin is missing; configure with -DGS_TORCH_BENCH=ON and build" \
      "model_runtime_bench gs_worker (README.md here)" >&2
    exit 2
  fi
done
MODELS=$(mktemp -d)
trap 'rm -rf "$MODELS"' EXIT

"$BENCH" --print_networks | nice -n 19 /usr/bin/python3 bench/models/make_models.py --out "$MODELS"

# run_bench LABEL BINARY [OpenBLAS]: one paired-rounds table.
run_bench() {
  echo "## $1"
  if [[ ${3:-} == OpenBLAS ]]; then
    LD_LIBRARY_PATH=$OPENBLAS_DIR OPENBLAS_NUM_THREADS=1 \
      nice -n 19 "$2" --models_dir="$MODELS" --rounds="$ROUNDS" "${FLAGS[@]}"
  else
    nice -n 19 "$2" --models_dir="$MODELS" --rounds="$ROUNDS" "${FLAGS[@]}"
  fi
}
FLAGS=("$@")
SYSTEM_BLAS=$(basename "$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)")
run_bench "built-in (default flags) | libtorch with the system's libblas.so.3 ($SYSTEM_BLAS)" "$BENCH"
BEST_BLAS=""
if [[ -n ${OPENBLAS_DIR:-} ]]; then
  if [[ ! -e $OPENBLAS_DIR/libblas.so.3 ]]; then
    echo "compare.sh: OPENBLAS_DIR=$OPENBLAS_DIR has no libblas.so.3" >&2
    exit 2
  fi
  BEST_BLAS=OpenBLAS
  run_bench "built-in (default flags) | libtorch with OpenBLAS, one thread" "$BENCH" OpenBLAS
fi
if [[ -x ${BENCH}_v3 ]]; then
  run_bench "built-in for x86-64-v3 | libtorch with ${BEST_BLAS:-$SYSTEM_BLAS}" "${BENCH}_v3" \
    ${BEST_BLAS:+"$BEST_BLAS"}
fi

# Start-up: exec to exit of gs_worker --version against the bench's --noop
# (returns at the top of main(), after libtorch's libraries are loaded and
# its static initializers ran), alternating which goes first.
ms_of() {
  local t0 t1
  t0=$(date +%s%N)
  "$@" >/dev/null
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000000))
}
echo "## start-up, ms (gs_worker --version | model_runtime_bench --noop)"
for ((r = 0; r < ROUNDS; r++)); do
  if ((r % 2 == 0)); then
    w=$(ms_of nice -n 19 "$WORKER" --version)
    t=$(ms_of nice -n 19 "$BENCH" --noop)
  else
    t=$(ms_of nice -n 19 "$BENCH" --noop)
    w=$(ms_of nice -n 19 "$WORKER" --version)
  fi
  echo "round $((r + 1)): $w | $t"
done

# What the binaries pull in: their own size and the shared libraries the
# loader maps (count and bytes on disk).
closure() {
  ldd "$1" | awk '$3 ~ /^\// {print $3}' | xargs -r readlink -f | sort -u
}
echo "## binaries (file MiB; shared libraries loaded: count, MiB)"
for bin in "$WORKER" "$BENCH" /usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13; do
  libs=$(closure "$bin")
  printf '%s: %.1f MiB; %d libraries, %.0f MiB\n' "$bin" \
    "$(stat -Lc %s "$bin" | awk '{print $1 / 1048576}')" "$(wc -l <<<"$libs")" \
    "$(xargs stat -Lc %s <<<"$libs" | awk '{s += $1} END {print s / 1048576}')"
done
