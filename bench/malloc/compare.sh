#!/usr/bin/env bash
# glibc malloc as tuned by [receive memory] (common/rpc/malloc_tuning.h)
# against jemalloc and tcmalloc, each given to ps_bench and the gs_shard it
# starts through LD_PRELOAD: the shard's receive path (push) and the
# worker's step (push + pull overlapped). Paired and interleaved: every round
# runs glibc, jemalloc, tcmalloc back to back, and each ratio is taken within
# its round, so load that drifts over minutes hits all three alike.
#
#   bench/malloc/compare.sh [ROUNDS] [extra ps_bench flags...]
#   CODEC=twobit bench/malloc/compare.sh 3 --model_floats=4194304
# CODEC (default none) is the push codec whose rows are compared (ps_bench
# measures fp32 beside any other codec).
#
# Needs libjemalloc2 and libtcmalloc-minimal4 (runtime libraries only).
# Prints one line per run, then per allocator the median over rounds of
# (its ms / glibc's ms in the same round) with the smallest and largest
# ratio, for push, step and the process's CPU seconds.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
ROUNDS=${1:-5}
shift || true
CODEC=${CODEC:-none}
BENCH="$BUILD_DIR/bench/ps_bench/ps_bench"
LIBDIR=/usr/lib/x86_64-linux-gnu
declare -A PRELOAD=([glibc]="" [jemalloc]="$LIBDIR/libjemalloc.so.2"
                    [tcmalloc]="$LIBDIR/libtcmalloc_minimal.so.4")
for lib in "${PRELOAD[@]}"; do
  [[ -z "$lib" || -e "$lib" ]] || { echo "missing $lib" >&2; exit 1; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((r = 1; r <= ROUNDS; r++)); do
  for a in glibc jemalloc tcmalloc; do
    TIMEFORMAT='%U %S'
    { time LD_PRELOAD="${PRELOAD[$a]}" "$BENCH" --codecs="$CODEC" --shards=1 --skip_raw "$@" \
        > "$out/$a.$r" 2> /dev/null; } 2> "$out/$a.$r.cpu"
    push=$(awk -v c="$CODEC" '$1 == "gradstream" && $2 == c && $4 == "push" {print $6}' \
      "$out/$a.$r")
    step=$(awk -v c="$CODEC" '$1 == "gradstream" && $2 == c && $4 == "step" {print $6}' \
      "$out/$a.$r")
    cpu=$(awk '{print $1 + $2}' "$out/$a.$r.cpu")
    echo "round $r $a push_ms $push step_ms $step cpu_s $cpu"
  done
done | tee "$out/runs"
echo "ratio to glibc (tuned) in the same round: median [min, max] over $ROUNDS rounds"
awk '
  { v[$2, $3, "push"] = $5; v[$2, $3, "step"] = $7; v[$2, $3, "cpu"] = $9; n = $2 }
  function show(a, m,   i, j, k, t, x, s) {
    for (i = 1; i <= n; i++) {
      t = v[i, a, m] / v[i, "glibc", m]
      for (j = i - 1; j >= 1 && x[j] > t; j--) x[j + 1] = x[j]
      x[j + 1] = t
    }
    s = (n % 2) ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2
    printf "  %-8s %-4s %.3f [%.3f, %.3f]\n", a, m, s, x[1], x[n]
  }
  END { split("jemalloc tcmalloc", al, " ")
        for (j = 1; j <= 2; j++) { show(al[j], "push"); show(al[j], "step"); show(al[j], "cpu") } }
' "$out/runs"
