#!/usr/bin/env bash
# Builds the libFuzzer targets with clang + ASan + UBSan and runs each for a
# bounded time. Fails on any crash, sanitizer report, timeout or violated
# property (each fuzzer aborts with "property violated: ..." on those).
#   ./scripts/fuzz.sh [seconds-per-target]   (default 60)
# Targets:
#   codec_fuzzer    common/codec: decoders and encoders on arbitrary chunks
#   session_fuzzer  server/shard: arbitrary WorkerMessage streams through the
#                   shard's SessionHandler into a Job
# (both in tests/fuzz/).
# A finding leaves its input in $BUILD_DIR/<crash|timeout|oom>-...; rerun it
# with `$BUILD_DIR/<path to fuzzer> <file>`.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DGS_FUZZ=ON \
  -DGS_SANITIZE=address,undefined -DGS_BUILD_TESTS=OFF -DGS_BUILD_BENCHMARKS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="-fno-sanitize-recover=all" >/dev/null
declare -A path=([codec_fuzzer]=tests/fuzz/codec_fuzzer [session_fuzzer]=tests/fuzz/session_fuzzer)
targets=(codec_fuzzer session_fuzzer)
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${targets[@]}"
# ASan's leak checker runs at exit; UBSan reports abort (-fno-sanitize-recover).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for t in "${targets[@]}"; do
  corpus="$BUILD_DIR/corpus-$t"
  log="$BUILD_DIR/fuzz-$t.log"
  mkdir -p "$corpus"
  echo "fuzz: $t for ${SECONDS_PER_TARGET}s"
  # The session fuzzer writes valid sessions into its corpus as seeds.
  seeds=""
  if [[ $t == session_fuzzer ]]; then seeds=$corpus; fi
  rc=0
  GS_SESSION_FUZZER_SEEDS="$seeds" "$BUILD_DIR/${path[$t]}" \
    -max_total_time="$SECONDS_PER_TARGET" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$BUILD_DIR/" \
    -print_final_stats=1 "$corpus" >"$log" 2>&1 || rc=$?
  grep -E '^(Done [0-9]+ runs|stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb))' \
    "$log" || true
  if [[ $rc -ne 0 ]]; then
    echo "fuzz: $t FAILED (exit $rc); the end of $log:" >&2
    tail -n 60 "$log" >&2
    failed+=("$t")
  fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz: findings in ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: no findings"
