#!/bin/sh
# Runs the bundle's CPU tests and checks that every binary finds its shared
# libraries in the bundle (all but the CUDA/driver stack, which only the GPU
# machine has). POSIX sh and coreutils only: meant for a bare Debian 12
# container with no -dev package, e.g.
#   docker run --rm -v $PWD/gpu-bundle:/b gradstream/debian:bookworm /b/run_cpu_tests.sh
# Exit status 0 when every test passed (GPU tests skip) and nothing is missing.
B=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
LOGS=${TMPDIR:-/tmp}/gs_cpu_tests
mkdir -p "$LOGS"
status=0

echo "== shared libraries (CUDA/driver stack excluded)"
cuda='libcuda|libcudart|libcublas|libcublasLt|libcudnn|libnvidia'
for f in "$B"/bin/* "$B"/tests/*; do
  missing=$(ldd "$f" 2>&1 | grep 'not found' | grep -Ev "$cuda" | awk '{print $1}' | tr '\n' ' ')
  if [ -n "$missing" ]; then
    echo "  $(basename "$f"): MISSING $missing"
    status=1
  fi
done
[ $status = 0 ] && echo "  every binary resolves its libraries from $B/lib or the base system"
gpu_only=$(for f in "$B"/bin/* "$B"/tests/*; do ldd "$f" 2>&1; done | grep 'not found' |
  awk '{print $1}' | sort -u | tr '\n' ' ')
[ -z "$gpu_only" ] || echo "  left to the GPU machine (CUDA stack): $gpu_only"

echo "== CPU tests (and GPU tests that need no CUDA library: they skip)"
for t in codec_test codec_cuda_test client_encode_test job_unit_test optimizer_test \
         shard_core_test cli_unit_test; do
  "$B/tests/$t" > "$LOGS/$t.log" 2>&1
  rc=$?
  summary=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ test' "$LOGS/$t.log" |
    sed 's/, listed below://' | tr -s ' ' | tr '\n' ' ')
  echo "  $t: exit $rc; $summary"
  if grep -q 'Skipped' "$LOGS/$t.log"; then
    grep -A1 ': Skipped' "$LOGS/$t.log" | grep -v -e ': Skipped' -e '^--' | sort | uniq -c |
      awk '{n = $1; $1 = ""; print "    skipped x" n ":" $0}'
  fi
  [ $rc = 0 ] || { status=1; tail -20 "$LOGS/$t.log"; }
done
echo "== $( [ $status = 0 ] && echo PASS || echo FAIL )"
exit $status
