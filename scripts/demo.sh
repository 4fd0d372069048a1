#!/usr/bin/env bash
# The gradstream demo: a real training job on a local cluster on loopback.
#
# Builds the four binaries, starts a coordinator, 2 parameter-server shards and
# 2 workers (CPU, or GPU when one is present), submits an MLP job on the
# synthetic Gaussian-clusters task with the default codec policy (ternary
# gradients; tensors under 16384 elements travel fp32, so the MLP is wide
# enough to have one that does not), shows live progress with `gradstream
# watch`, and ends with the final test accuracy and the bytes pushed versus
# what fp32 would have sent.
#
# Environment: BUILD_DIR (default build), CODEC (default: none given, the job's default policy), STEPS
# (default 1500), WORKERS (default 2), KEEP=1 to leave the cluster running.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build}
CODEC=${CODEC:-}
CODEC_FLAGS=()
if [ -n "$CODEC" ]; then CODEC_FLAGS=(--codec="$CODEC"); fi
STEPS=${STEPS:-1500}
WORKERS=${WORKERS:-2}

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target gs_coordinator gs_shard gs_worker gradstream
BIN=$BUILD_DIR
COORD_BIN=$BIN/server/coordinator/gs_coordinator
SHARD_BIN=$BIN/server/shard/gs_shard
WORKER_BIN=$BIN/worker/trainer/gs_worker
CLI=$BIN/cli/gradstream

RUN=$(mktemp -d /tmp/gradstream-demo.XXXXXX)
PIDS=()
cleanup() {
  if [ "${KEEP:-0}" != 1 ]; then
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
  fi
}
trap cleanup EXIT

# Waits (with a deadline) until a process has written its bound port.
wait_port() {
  local file=$1 deadline=$((SECONDS + 30))
  until [ -s "$file" ]; do
    if [ $SECONDS -gt $deadline ]; then echo "demo: timed out waiting for $file" >&2; exit 1; fi
    sleep 0.1
  done
  cat "$file"
}

echo "== starting 2 shards, a coordinator and $WORKERS workers (logs in $RUN)"
SHARDS=()
for i in 0 1; do
  "$SHARD_BIN" --port=0 --port_file="$RUN/shard$i.port" --shard_index=$i \
    --checkpoint_dir="$RUN/ckpt$i" >"$RUN/shard$i.log" 2>&1 &
  PIDS+=($!)
done
for i in 0 1; do SHARDS+=("127.0.0.1:$(wait_port "$RUN/shard$i.port")"); done
"$COORD_BIN" --port=0 --port_file="$RUN/coordinator.port" --state_file="$RUN/coordinator.state" \
  --shards="$(IFS=,; echo "${SHARDS[*]}")" >"$RUN/coordinator.log" 2>&1 &
PIDS+=($!)
export GRADSTREAM_COORDINATOR="127.0.0.1:$(wait_port "$RUN/coordinator.port")"
for i in $(seq 1 "$WORKERS"); do
  "$WORKER_BIN" --name="demo-worker-$i" >"$RUN/worker$i.log" 2>&1 &
  PIDS+=($!)
done

# Wait (with a deadline) until every worker has registered.
deadline=$((SECONDS + 30))
until [ "$("$CLI" cluster --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("workers", [])))')" -ge "$WORKERS" ]; do
  if [ $SECONDS -gt $deadline ]; then echo "demo: workers did not register (logs in $RUN)" >&2; exit 1; fi
  sleep 0.2
done
"$CLI" cluster
echo
echo "== submitting: MLP 20-256-256-10, synthetic 10 classes x 3 clusters, $WORKERS workers, $STEPS clocks, codec ${CODEC:-default}, sync, server momentum"
JOB=$("$CLI" submit --name=demo --model=mlp --hidden=256,256 --dataset=synthetic --steps="$STEPS" \
  --batch_size=32 --optimizer=momentum --lr=0.05 --momentum=0.9 "${CODEC_FLAGS[@]}" \
  --consistency=sync --workers="$WORKERS" --checkpoint_every=500 --eval_every=250 --json |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["job_id"])')
echo "job $JOB"
"$CLI" watch "$JOB"
echo
"$CLI" status "$JOB"
"$CLI" status "$JOB" --json | python3 -c '
import json, sys
j = json.load(sys.stdin)
p = j.get("progress", {})
sent, fp32 = int(p.get("bytes_pushed", 0)), int(p.get("fp32_bytes_pushed", 0))
print()
print("== result")
print("final test accuracy : %.4f (clock %s)" % (p.get("accuracy", 0.0), p.get("accuracy_clock", 0)))
print("gradient bytes sent : %d (%.2f MiB)" % (sent, sent / 2**20))
print("fp32 would have sent: %d (%.2f MiB)" % (fp32, fp32 / 2**20))
if sent:
    print("compression         : %.1fx less traffic" % (fp32 / sent))
'
