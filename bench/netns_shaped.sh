#!/usr/bin/env bash
# Shaped-link step benchmark: gs_shard processes (and ps_bench's raw sink) in
# one network namespace, the ps_bench client in another, joined by a veth
# pair that tc's token bucket limits to RATE (default 1 Gbit/s) in both
# directions. ROUNDS rounds, interleaved; each round runs
#   1. ps_bench, 1 worker against 1 shard: push, pull, serial step (push then
#      pull) and overlapped step (see [overlapped pull] in
#      worker/client/ps_client.h) for fp32 vs twobit vs ternary, each with its
#      push codec as pull codec, paired with the fp32 baseline (see [paired
#      baseline] in bench/ps_bench/ps_bench.cc);
#   2. torch.distributed.all_reduce (gloo, 2 ranks, one per namespace) of the
#      same tensor across the same link (bench/allreduce_gloo.py; skipped when
#      PYTHON cannot import torch);
#   3. unless WIDE=0, ps_bench with 4 workers (one process, in the client
#      namespace) against 2 shards, all sharing the link.
# The summary gives medians over rounds of each time, and medians over rounds
# of each round's ratios (ps_bench's paired ones; the all-reduce's against the
# same round's step).
#
#   sudo bench/netns_shaped.sh                    # build dir: build-client
#   sudo BUILD=build ROUNDS=3 RATE=500mbit MODEL_FLOATS=4194304 bench/netns_shaped.sh
#   sudo BENCH_ARGS=--pull_first=false bench/netns_shaped.sh   # pull after the pushes
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
ROUNDS=${ROUNDS:-${REPS:-3}}
WIDE=${WIDE:-1}
CODECS=${CODECS:-none,twobit,ternary}
PULL_CODECS=${PULL_CODECS:-same}
PYTHON=${PYTHON:-/usr/bin/python3}
BENCH_ARGS=${BENCH_ARGS:-}  # more ps_bench flags, e.g. --pull_first=false

for bin in "$PS_BENCH" "$GS_SHARD"; do
  [[ -x $bin ]] || { echo "missing $bin (build ps_bench and gs_shard first)" >&2; exit 1; }
done
why=$("$ROOT/scripts/netns_check.sh") ||
  { echo "netns_shaped.sh needs network namespaces: $why" >&2; exit 1; }

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
ip netns exec "$NS_SRV" "$GS_SHARD" --address="$SRV_IP" --port=0 --port_file="$WORK/shard2.port" \
  --shard_index=1 >"$WORK/shard2.log" 2>&1 &
PIDS+=($!)
SHARD2_PORT=$(wait_port "$WORK/shard2.port" "${PIDS[-1]}")
ip netns exec "$NS_SRV" "$PS_BENCH" --serve_raw --bind="$SRV_IP" --port=0 \
  --port_file="$WORK/raw.port" >"$WORK/raw.log" 2>&1 &
PIDS+=($!)
RAW_PORT=$(wait_port "$WORK/raw.port" "${PIDS[-1]}")

echo "shaped link: $RATE (tbf) between $NS_CLI ($CLI_IP) and $NS_SRV ($SRV_IP)"
timeout 5 ip netns exec "$NS_CLI" bash -c "exec 3<>/dev/tcp/$SRV_IP/$SHARD_PORT" ||
  { echo "cannot reach $SRV_IP:$SHARD_PORT across the veth pair" >&2; exit 1; }

HAVE_TORCH=0
"$PYTHON" -c "import torch.distributed" 2>/dev/null && HAVE_TORCH=1
[[ $HAVE_TORCH == 1 ]] ||
  echo "($PYTHON cannot import torch.distributed: all-reduce skipped; apt-get install python3-torch)"

# The all-reduce of the same tensor across the same link; prints its median ms.
allreduce() {
  local round=$1
  # gloo picks its address from the hostname (loopback here) unless told the interface.
  ip netns exec "$NS_SRV" env GLOO_SOCKET_IFNAME="$VETH_SRV" timeout 300 \
    "$PYTHON" "$ROOT/bench/allreduce_gloo.py" --rank=0 --world=2 \
    --master="$SRV_IP:$((29512 + round))" --floats="$MODEL_FLOATS" --reps=3 \
    >"$WORK/allreduce.$round" 2>&1 &
  local ar0=$!
  ip netns exec "$NS_CLI" env GLOO_SOCKET_IFNAME="$VETH_CLI" timeout 300 \
    "$PYTHON" "$ROOT/bench/allreduce_gloo.py" --rank=1 --world=2 \
    --master="$SRV_IP:$((29512 + round))" --floats="$MODEL_FLOATS" --reps=3 \
    >"$WORK/allreduce1.$round" 2>&1 ||
    { echo "allreduce rank 1 failed:" >&2; cat "$WORK/allreduce1.$round" >&2; }
  wait "$ar0" 2>/dev/null || true
  cat "$WORK/allreduce.$round" >&2
  awk '/^allreduce/ { print $5 }' "$WORK/allreduce.$round"
}

for round in $(seq 1 "$ROUNDS"); do
  echo "=== round $round of $ROUNDS: 1 worker, 1 shard"
  ip netns exec "$NS_CLI" "$PS_BENCH" \
    --shard_addresses="$SRV_IP:$SHARD_PORT" --raw_address="$SRV_IP:$RAW_PORT" \
    --codecs="$CODECS" --pull_codecs="$PULL_CODECS" --model_floats="$MODEL_FLOATS" --reps=1 \
    --warmup=1 --time_budget_s=300 $BENCH_ARGS 2>"$WORK/bench.err.$round" | tee "$WORK/bench.$round"
  if [[ $HAVE_TORCH == 1 ]]; then
    ar=$(allreduce "$round")
    echo "allreduce $ar ms"
    echo "allreduce $ar" >>"$WORK/bench.$round"
  fi
  if [[ $WIDE != 0 ]]; then
    echo "=== round $round of $ROUNDS: 4 workers, 2 shards"
    ip netns exec "$NS_CLI" "$PS_BENCH" \
      --shard_addresses="$SRV_IP:$SHARD_PORT,$SRV_IP:$SHARD2_PORT" --skip_raw --workers=4 \
      --codecs="$CODECS" --pull_codecs="$PULL_CODECS" --model_floats="$MODEL_FLOATS" --reps=1 \
      --warmup=1 --time_budget_s=300 $BENCH_ARGS 2>"$WORK/wide.err.$round" | tee "$WORK/wide.$round"
  fi
done

# Medians over rounds: times per (codec, op), and each round's ratios.
summary() {
  local title=$1
  shift
  echo
  echo "$title"
  awk -v rounds="$ROUNDS" '
    function median(key,   n, i, j, t, v) {
      n = cnt[key]
      for (i = 1; i <= n; ++i) v[i] = val[key, i]
      for (i = 2; i <= n; ++i) for (j = i; j > 1 && v[j - 1] > v[j]; --j) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
      return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    function add(key, x) { val[key, ++cnt[key]] = x }
    FNR == 1 { ++file }
    /^gradstream (none|twobit|ternary|onebit) / {
      add($2 "|" $4, $6); seen[$2] = 1
      if ($4 == "step") step[file, $2] = $6
    }
    /speed-up over fp32, paired/ { r = $0; sub(/^ */, "", r); sub(/ speed-up over fp32, paired.*$/, "", r); x = $0; sub(/.*\] */, "", x); split(x, w, " "); add("ratio|" r, w[1]); ratios[r] = 1 }
    /^allreduce [0-9.]+$/ { add("allreduce", $2); ar[file] = $2 }
    END {
      printf "  %-8s %9s %9s %9s %9s %14s\n", "codec", "push ms", "pull ms", "serial ms", "step ms", "ar / step"
      n = split("none twobit ternary onebit", order, " ")
      for (i = 1; i <= n; ++i) if ((c = order[i]) in seen) {
        # The all-reduce against the same round'\''s step, per round.
        for (k = 1; k <= file; ++k) if ((k in ar) && step[k, c] > 0) add("ar|" c, ar[k] / step[k, c])
        printf "  %-8s %9.1f %9.1f %9.1f %9.1f %14s\n", c, median(c "|push"), median(c "|pull"),
          median(c "|serial"), median(c "|step"), cnt["ar|" c] ? sprintf("%.2fx", median("ar|" c)) : "-"
      }
      if (cnt["allreduce"]) printf "  %-8s %39s %9.1f\n", "allreduce", "(gloo, 2 ranks)", median("allreduce")
      print "  paired ratios (median over rounds of each round'\''s ratio):"
      for (r in ratios) printf "    %-58s %6.2f  (%d rounds)\n", r, median("ratio|" r), cnt["ratio|" r]
    }' "$@"
}

echo
echo "one step's communication on a $RATE link, model $MODEL_FLOATS floats, $ROUNDS rounds"
echo "(serial = push then pull; step = push and pull overlapped, see [overlapped pull])"
summary "1 worker, 1 shard:" "$WORK"/bench.*
[[ $WIDE != 0 ]] && summary "4 workers, 2 shards, one link (slowest worker's times):" "$WORK"/wide.*
exit 0
