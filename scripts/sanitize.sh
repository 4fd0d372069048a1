#!/usr/bin/env bash
# Load test under sanitizers: builds gs_shard, tests/load/ps_load and
# worker/capi/capi_threads_test with ThreadSanitizer (build-tsan) and with
# AddressSanitizer + UBSan (build-asan) and runs, in each, ps_load (128
# workers x 2 shards on loopback for a bounded time) and capi_threads_test
# (the C ABI called from several threads at once, see [C ABI threads]). Fails on any sanitizer report (in the shards or in the load driver
# with its 128 PsClients), any error, or RSS growth (see ps_load.cc).
#   ./scripts/sanitize.sh [seconds]      (default 20; the load phase of each run)
#   SANITIZERS="thread address"          which runs (default both)
#   JOBS=2                               build parallelism (default nproc)
# Reports land in <build dir>/sanitizer-logs/ (one file per process that
# reported) and are printed.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-20}
JOBS=${JOBS:-$(nproc)}
SANITIZERS=${SANITIZERS:-thread address}
ROOT=$PWD

run() {  # run <name> <build dir> <GS_SANITIZE> <extra CXX flags>
  local name=$1 dir=$2 sanitize=$3 cxxflags=$4
  local start=$SECONDS
  echo "sanitize: [$name] configure + build in $dir"
  # Tests stay configured (-DGS_BUILD_TESTS=OFF does not configure today)
  # but only the two targets are built.
  # -O1: the sanitizers' overhead dominates anyway and it compiles faster on
  # the 2-core CI machine; full -g so reports show inlined gRPC frames (the
  # TSan suppressions match them).
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGS_SANITIZE="$sanitize" \
    -DGS_CUDA=OFF -DGS_BUILD_BENCHMARKS=OFF -DCMAKE_CXX_FLAGS="$cxxflags" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g -DNDEBUG" >/dev/null || return 1
  cmake --build "$dir" -j "$JOBS" --target gs_shard ps_load capi_threads_test || return 1
  local built=$SECONDS
  local logs="$ROOT/$dir/sanitizer-logs"
  rm -rf "$logs"
  mkdir -p "$logs"
  echo "sanitize: [$name] ps_load for ${DURATION}s (build took $((built - start))s)"
  # The shards are children of ps_load and inherit these options.
  local rc=0
  # TSan: report everything, then fail (exit 66); interceptors called from
  # the uninstrumented gRPC/protobuf are ignored, and gRPC-internal races are
  # suppressed (see tests/sanitizers/tsan.supp; history_size=7 restores the
  # earlier access's stack those entries may need).
  export TSAN_OPTIONS="halt_on_error=0 exitcode=66 second_deadlock_stack=1 history_size=7 ignore_noninstrumented_modules=1 log_path=$logs/tsan suppressions=$ROOT/tests/sanitizers/tsan.supp"
  export ASAN_OPTIONS="halt_on_error=1 detect_leaks=1 quarantine_size_mb=32 log_path=$logs/asan"
  export LSAN_OPTIONS="suppressions=$ROOT/tests/sanitizers/lsan.supp"
  export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1 log_path=$logs/ubsan"
  "$dir/tests/load/ps_load" --duration_s="$DURATION" --wait_timeout_s=120 \
    --drain_timeout_s=240 >"$logs/ps_load.out" 2>"$logs/ps_load.err" || rc=$?
  if ! "$dir/worker/capi/capi_threads_test" >"$logs/capi_threads.out" 2>&1; then
    echo "sanitize: [$name] capi_threads_test failed:" >&2
    grep -v '^I[0-9]' "$logs/capi_threads.out" | tail -n 30 >&2 || true
    [[ $rc -ne 0 ]] || rc=1
  fi
  unset TSAN_OPTIONS ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS
  sed -n '/^ps_load:/,$p' "$logs/ps_load.out"
  local reports
  reports=$(find "$logs" -name 'tsan.*' -o -name 'asan.*' -o -name 'ubsan.*')
  if [[ -n $reports ]]; then
    echo "sanitize: [$name] sanitizer reports:" >&2
    for f in $reports; do
      echo "==== $f" >&2
      cat "$f" >&2
    done
    [[ $rc -ne 0 ]] || rc=1
  fi
  if [[ $rc -ne 0 ]]; then
    echo "sanitize: [$name] FAILED (exit $rc); the end of the driver's stderr:" >&2
    grep -v '^I[0-9]' "$logs/ps_load.err" | tail -n 40 >&2 || true
    return 1
  fi
  echo "sanitize: [$name] clean ($((SECONDS - start))s)"
}

failed=0
for s in $SANITIZERS; do
  case $s in
    # -Wno-tsan: Abseil's flag headers use atomic_thread_fence, which GCC
    # warns TSan does not model; ours do not.
    thread) run tsan build-tsan thread "-Wno-tsan" || failed=1 ;;
    address) run asan build-asan address,undefined "-fno-sanitize-recover=all" || failed=1 ;;
    *) echo "sanitize: unknown sanitizer '$s'" >&2; exit 2 ;;
  esac
done
if [[ $failed -ne 0 ]]; then
  echo "sanitize: FAILED" >&2
  exit 1
fi
echo "sanitize: no findings (${SECONDS}s)"
