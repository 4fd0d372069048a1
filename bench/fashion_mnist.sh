#!/usr/bin/env bash
# Trains the built-in CNN on Fashion-MNIST (Debian's dataset-fashion-mnist,
# read gzip-compressed as installed) once per codec spec through the real
# processes -- 2 gs_shard, gs_coordinator, 2 gs_worker on loopback -- prints
# each job's final accuracy and bytes, and draws every job into one picture
# with `gradstream plot`.
#
#   bench/fashion_mnist.sh [SPEC...]     SPEC = CODEC or "CODEC:EXTRA SUBMIT FLAGS"
#   e.g. bench/fashion_mnist.sh none twobit ternary onebit "twobit:--min_compress_elems=4096"
#
#   BUILD=build STEPS=3000 EVAL=250 OUT=fashion_mnist.png DATA=/usr/share/datasets/fashion-mnist
# 2 workers, sync, batch 32, server momentum 0.9, lr 0.02: 3000 clocks is
# about 3.2 epochs. Each job takes about 35 s on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
STEPS=${STEPS:-3000}
EVAL=${EVAL:-250}
OUT=${OUT:-fashion_mnist.png}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
[ $# -gt 0 ] || set -- none twobit ternary onebit
[ -e "$DATA/train-images-idx3-ubyte.gz" ] || [ -e "$DATA/train-images-idx3-ubyte" ] || {
  echo "fashion_mnist: no Fashion-MNIST in $DATA (apt-get install dataset-fashion-mnist)" >&2; exit 2; }
RUN=$(mktemp -d /tmp/gradstream-fmnist.XXXXXX)
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
wait_port() {  # the daemons write their bound port once they serve
  for _ in $(seq 300); do [ -s "$1" ] && { cat "$1"; return; }; sleep 0.1; done
  echo "fashion_mnist: timed out waiting for $1 (logs in $RUN)" >&2; exit 1
}
for i in 0 1; do
  "$BUILD/server/shard/gs_shard" --port=0 --port_file="$RUN/shard$i.port" --shard_index=$i \
    --checkpoint_dir="$RUN/ckpt$i" >"$RUN/shard$i.log" 2>&1 &
done
SHARDS="127.0.0.1:$(wait_port "$RUN/shard0.port"),127.0.0.1:$(wait_port "$RUN/shard1.port")"
"$BUILD/server/coordinator/gs_coordinator" --port=0 --port_file="$RUN/coordinator.port" \
  --state_file="$RUN/coordinator.state" --shards="$SHARDS" >"$RUN/coordinator.log" 2>&1 &
export GRADSTREAM_COORDINATOR="127.0.0.1:$(wait_port "$RUN/coordinator.port")"
for w in 1 2; do
  "$BUILD/worker/trainer/gs_worker" --coordinator="$GRADSTREAM_COORDINATOR" --name="fmnist-$w" \
    --device=cpu >"$RUN/worker$w.log" 2>&1 &
done
CLI="$BUILD/cli/gradstream"
jobs_run=()
printf '%-12s %-52s %9s %10s %7s\n' JOB SPEC ACCURACY PUSHED RATIO
for spec in "$@"; do
  codec=${spec%%:*}
  extra=""
  [ "$codec" = "$spec" ] || extra=${spec#*:}
  # shellcheck disable=SC2086  # EXTRA holds several flags
  id=$("$CLI" submit --name="fmnist-$codec" --model=cnn --dataset="mnist:$DATA" \
        --steps="$STEPS" --batch_size=32 --optimizer=momentum --lr=0.02 --momentum=0.9 \
        --codec="$codec" --workers=2 --eval_every="$EVAL" $extra | awk '/submitted/{print $2}')
  "$CLI" watch "$id" --interval=5s >/dev/null
  "$CLI" status "$id" --json >"$RUN/$id.json"
  python3 - "$RUN/$id.json" "$id" "$spec" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); p = j["progress"]
print("%-12s %-52s %9.4f %8.1fMi %6.1fx" % (sys.argv[2], sys.argv[3][:52], p["accuracy"],
      int(p["bytes_pushed"]) / 2**20, p["compression_ratio"]))
PY
  jobs_run+=("$id")
done
"$CLI" plot "${jobs_run[@]}" -o "$OUT"
