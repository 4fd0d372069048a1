#!/usr/bin/env bash
# Shaped-link step benchmark: one gs_shard (and ps_bench's raw sink) in one
# network namespace, the ps_bench client in another, joined by a veth pair
# that tc's token bucket limits to RATE (default 1 Gbit/s) in both
# directions. Reports push, pull and whole-step (push + pull) time for
# fp32 vs twobit vs ternary, each with the same pull codec as push codec
# (paired with the fp32 baseline, see [paired baseline] in ps_bench.cc),
# and then torch.distributed.all_reduce (gloo, 2 ranks, one per namespace)
# of the same tensor across the same link (bench/allreduce_gloo.py; skipped
# when PYTHON cannot import torch).
#
#   sudo bench/netns_shaped.sh                    # build dir: build-client
#   sudo BUILD=build RATE=500mbit MODEL_FLOATS=4194304 bench/netns_shaped.sh
#
# Needs root (ip netns, tc). Everything it creates -- two namespaces, the veth
# pair and the private 10.213.77.0/30 addresses inside them -- is removed on
# exit by the trap; the host's own interfaces and routes are never touched.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-client}
PS_BENCH=${PS_BENCH:-$BUILD/bench/ps_bench/ps_bench}
GS_SHARD=${GS_SHARD:-$BUILD/server/shard/gs_shard}
RATE=${RATE:-1gbit}
MODEL_FLOATS=${MODEL_FLOATS:-16777216}
REPS=${REPS:-3}
CODECS=${CODECS:-none,twobit,ternary}
PULL_CODECS=${PULL_CODECS:-same}
PYTHON=${PYTHON:-/usr/bin/python3}

for bin in "$PS_BENCH" "$GS_SHARD"; do
  [[ -x $bin ]] || { echo "missing $bin (build ps_bench and gs_shard first)" >&2; exit 1; }
done
[[ $(id -u) -eq 0 ]] || { echo "needs root (ip netns, tc)" >&2; exit 1; }

TAG=$$
NS_SRV=gs_srv_$TAG
NS_CLI=gs_cli_$TAG
VETH_SRV=gsvs$TAG
VETH_CLI=gsvc$TAG
SRV_IP=10.213.77.1
CLI_IP=10.213.77.2
WORK=$(mktemp -d /tmp/gs_netns.XXXXXX)
PIDS=()

cleanup() {
  set +e
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  ip netns del "$NS_CLI" 2>/dev/null   # deleting a namespace removes its veth end (and the peer)
  ip netns del "$NS_SRV" 2>/dev/null
  ip link del "$VETH_SRV" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

ip netns add "$NS_SRV"
ip netns add "$NS_CLI"
ip link add "$VETH_SRV" type veth peer name "$VETH_CLI"
ip link set "$VETH_SRV" netns "$NS_SRV"
ip link set "$VETH_CLI" netns "$NS_CLI"
ip -n "$NS_SRV" addr add "$SRV_IP/30" dev "$VETH_SRV"
ip -n "$NS_CLI" addr add "$CLI_IP/30" dev "$VETH_CLI"
for ns in "$NS_SRV" "$NS_CLI"; do ip -n "$ns" link set lo up; done
ip -n "$NS_SRV" link set "$VETH_SRV" up
ip -n "$NS_CLI" link set "$VETH_CLI" up
# Token bucket on each egress: both push (cli->srv) and pull (srv->cli) are shaped.
ip netns exec "$NS_SRV" tc qdisc add dev "$VETH_SRV" root tbf rate "$RATE" burst 512kb latency 50ms
ip netns exec "$NS_CLI" tc qdisc add dev "$VETH_CLI" root tbf rate "$RATE" burst 512kb latency 50ms

# Waits (bounded) for a child to write its bound port.
wait_port() {
  local file=$1 pid=$2
  for _ in $(seq 1 400); do
    if [[ -s $file ]]; then cat "$file"; return 0; fi
    kill -0 "$pid" 2>/dev/null || { echo "process $pid exited before writing $file" >&2; return 1; }
    sleep 0.05
  done
  echo "timed out waiting for $file" >&2
  return 1
}

ip netns exec "$NS_SRV" "$GS_SHARD" --address="$SRV_IP" --port=0 --port_file="$WORK/shard.port" \
  >"$WORK/shard.log" 2>&1 &
PIDS+=($!)
SHARD_PORT=$(wait_port "$WORK/shard.port" "${PIDS[-1]}")
ip netns exec "$NS_SRV" "$PS_BENCH" --serve_raw --bind="$SRV_IP" --port=0 \
  --port_file="$WORK/raw.port" >"$WORK/raw.log" 2>&1 &
PIDS+=($!)
RAW_PORT=$(wait_port "$WORK/raw.port" "${PIDS[-1]}")

echo "shaped link: $RATE (tbf) between $NS_CLI ($CLI_IP) and $NS_SRV ($SRV_IP)"
timeout 5 ip netns exec "$NS_CLI" bash -c "exec 3<>/dev/tcp/$SRV_IP/$SHARD_PORT" ||
  { echo "cannot reach $SRV_IP:$SHARD_PORT across the veth pair" >&2; exit 1; }

ip netns exec "$NS_CLI" "$PS_BENCH" \
  --shard_addresses="$SRV_IP:$SHARD_PORT" --raw_address="$SRV_IP:$RAW_PORT" \
  --codecs="$CODECS" --pull_codecs="$PULL_CODECS" --model_floats="$MODEL_FLOATS" --reps="$REPS" --warmup=1 \
  --time_budget_s=120 2>"$WORK/bench.err" | tee "$WORK/bench.out"

# The all-reduce of the same tensor across the same link.
ALLREDUCE=""
if "$PYTHON" -c "import torch.distributed" 2>/dev/null; then
  # gloo picks its address from the hostname (loopback here) unless told the interface.
  ip netns exec "$NS_SRV" env GLOO_SOCKET_IFNAME="$VETH_SRV" timeout 300 \
    "$PYTHON" "$ROOT/bench/allreduce_gloo.py" --rank=0 --world=2 \
    --master="$SRV_IP:29512" --floats="$MODEL_FLOATS" --reps="$REPS" >"$WORK/allreduce.out" 2>&1 &
  PIDS+=($!)
  AR0=${PIDS[-1]}
  ip netns exec "$NS_CLI" env GLOO_SOCKET_IFNAME="$VETH_CLI" timeout 300 \
    "$PYTHON" "$ROOT/bench/allreduce_gloo.py" --rank=1 --world=2 \
    --master="$SRV_IP:29512" --floats="$MODEL_FLOATS" --reps="$REPS" >"$WORK/allreduce1.out" 2>&1 ||
    { echo "allreduce rank 1 failed:" >&2; cat "$WORK/allreduce1.out" >&2; }
  wait "$AR0" 2>/dev/null || true
  cat "$WORK/allreduce.out"
  ALLREDUCE=$(awk '/^allreduce/ { print $5 }' "$WORK/allreduce.out")
else
  echo "($PYTHON cannot import torch.distributed: all-reduce skipped; apt-get install python3-torch)"
fi

# Push, pull and step time per codec; the speedups are the paired ones above.
echo
echo "one step's communication on a $RATE link (model $MODEL_FLOATS floats, medians):"
awk -v ar="$ALLREDUCE" '
  /^gradstream (none|twobit|ternary|onebit) / { ms[$2, $4] = $6; seen[$2] = 1 }
  END {
    printf "  %-8s %10s %10s %10s %14s\n", "codec", "push ms", "pull ms", "step ms", "vs all-reduce"
    n = split("none twobit ternary onebit", order, " ")
    for (i = 1; i <= n; ++i) if ((c = order[i]) in seen)
      printf "  %-8s %10.1f %10.1f %10.1f %14s\n", c, ms[c, "push"], ms[c, "pull"], ms[c, "step"],
        (ar != "" && ms[c, "step"] > 0) ? sprintf("%.2fx", ar / ms[c, "step"]) : "-"
    if (ar != "") printf "  %-8s %32s %10.1f\n", "allreduce", "(gloo, 2 ranks)", ar
  }' "$WORK/bench.out"
