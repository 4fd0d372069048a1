#!/usr/bin/env bash
# fp32 push (and pull) of gradstream against ps-lite on loopback: one worker,
# one server, one 64 MiB key, paired and interleaved (README.md here).
#
#   bench/pslite/run.sh [--reps N] [--warmup N] [--floats N] [--build DIR]
#
# Builds ps-lite from its public source under /tmp (never in this tree) against
# Debian's ZeroMQ and protobuf (apt-get install libzmq3-dev protobuf-compiler
# libprotobuf-dev), builds pslite_step.cc against it, builds gs_step_loop in
# the gradstream build dir (default: build/), then runs bench/pslite/pair.py:
# each repetition is one ps-lite step (push + pull) right before one gradstream
# fp32 step and one twobit step; it prints the median of per-pair ratios.
# ps-lite comes from PSLITE_SRC (a checkout), else a clone of PSLITE_GIT
# (default https://github.com/dmlc/ps-lite); when neither can be had, or its
# build fails, the script says so and exits 0 (skipped: CI does not run it).
# GS_BEFORE_SHARD=<a gs_shard binary> adds the same two gradstream cases on
# that shard (e.g. a build of an older commit), paired with ps-lite too.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
reps=15 warmup=2 floats=$((16 << 20)) build="$root/build"
while [[ $# -gt 0 ]]; do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --floats) floats=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "usage: $0 [--reps N] [--warmup N] [--floats N] [--build DIR]" >&2; exit 2 ;;
  esac
done

work=${PSLITE_WORK:-/tmp/gs-pslite}
skip() { echo "SKIPPED: $*" >&2; exit 0; }

# ---- ps-lite, under $work ----------------------------------------------------
mkdir -p "$work"
if [[ ! -f "$work/src/CMakeLists.txt" ]]; then
  rm -rf "$work/src"
  if [[ -n "${PSLITE_SRC:-}" ]]; then
    git clone -q "$PSLITE_SRC" "$work/src" || skip "cannot clone ps-lite from $PSLITE_SRC"
  else
    git clone -q --depth 1 "${PSLITE_GIT:-https://github.com/dmlc/ps-lite}" "$work/src" ||
      skip "cannot fetch ps-lite (no network?); set PSLITE_SRC to a local checkout"
  fi
fi
for f in /usr/include/zmq.h /usr/bin/protoc /usr/include/google/protobuf/message.h; do
  [[ -e $f ]] || skip "$f missing: apt-get install -y libzmq3-dev protobuf-compiler libprotobuf-dev"
done
if [[ ! -f "$work/build/libpslite.a" ]]; then
  # find_package(ZMQ) finds the system library, so ps-lite does not download
  # its own; only the library is built, not its tests.
  cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_POLICY_VERSION_MINIMUM=3.5 >"$work/cmake.log" 2>&1 ||
    skip "ps-lite cmake failed (see $work/cmake.log)"
  cmake --build "$work/build" --target pslite -j2 >"$work/build.log" 2>&1 ||
    skip "ps-lite build failed (see $work/build.log)"
fi
g++ -O2 -std=c++14 -o "$work/pslite_step" "$here/pslite_step.cc" \
    -I"$work/src/include" -I"$work/build" "$work/build/libpslite.a" \
    -lzmq -lprotobuf -lpthread ||
  skip "pslite_step does not build against this ps-lite"

# ---- gradstream's side -------------------------------------------------------
ninja -C "$build" gs_shard gs_step_loop >/dev/null
loop="$build/bench/pslite/gs_step_loop --model_floats=$floats"

# ps-lite: a scheduler, a server and the worker (which pair.py talks to), on a
# free port; the worker's exit (after "quit") lets Finalize end the others.
port=$(/usr/bin/env python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
pslite="export DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1 DMLC_PS_ROOT_URI=127.0.0.1 \
DMLC_PS_ROOT_PORT=$port DMLC_NODE_HOST=127.0.0.1 DMLC_INTERFACE=lo PSLITE_STEP_FLOATS=$floats; \
DMLC_ROLE=scheduler $work/pslite_step </dev/null >/dev/null 2>&1 & \
DMLC_ROLE=server $work/pslite_step </dev/null >/dev/null 2>&1 & \
PSLITE_SERVER_PID=\$! DMLC_ROLE=worker exec $work/pslite_step 2>/dev/null"

echo "ps-lite $(git -C "$work/src" log -1 --format=%h) vs gradstream $(git -C "$root" log -1 --format=%h)," \
     "$((floats * 4 >> 20)) MiB, 1 worker, 1 server, loopback"
cases=("gradstream-fp32=$loop --codec=none" "gradstream-twobit=$loop --codec=twobit")
if [[ -n "${GS_BEFORE_SHARD:-}" ]]; then
  cases+=("before-fp32=$loop --codec=none --shard_binary=$GS_BEFORE_SHARD"
          "before-twobit=$loop --codec=twobit --shard_binary=$GS_BEFORE_SHARD")
fi
/usr/bin/env python3 "$here/pair.py" --reps "$reps" --warmup "$warmup" "ps-lite=$pslite" "${cases[@]}"
