#!/usr/bin/env bash
# The coordinator's restart with a long history, in-process and as the real
# binary (10,000 finished jobs and 200 live workers back in service in under
# 2 s; results in README.md here).
#
#   bench/restart/restart.sh [DIR]     (BUILD=build by default)
#
# 1. restart_bench builds DIR/coordinator.db through the coordinator's API
#    and the StateStore, then times Coordinator::Open, GetCluster, the tick
#    that re-creates the running jobs on their shards, and every worker's
#    heartbeat (see restart_bench.cc).
# 2. gs_coordinator is started on that database: the time from exec until
#    `gradstream cluster` answers with every worker.
set -euo pipefail
BUILD=${BUILD:-build}
DIR=${1:-/tmp/restart_bench}
"$BUILD/bench/restart/restart_bench" --dir="$DIR" 2>"$DIR.bench.log"
rm -f "$DIR/port"
start=$(date +%s%N)
"$BUILD/server/coordinator/gs_coordinator" --port=0 --port_file="$DIR/port" \
  --state_file="$DIR/coordinator.db" --keep_finished=100000 2>"$DIR/coordinator.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
deadline=$((start + 30000000000))
until [ -s "$DIR/port" ] &&
  "$BUILD/cli/gradstream" cluster --coordinator="127.0.0.1:$(cat "$DIR/port")" --json \
    >"$DIR/cluster.json" 2>/dev/null; do
  if [ "$(date +%s%N)" -gt "$deadline" ]; then
    echo "restart.sh: gs_coordinator did not answer in 30 s (see $DIR/coordinator.log)" >&2
    exit 1
  fi
  sleep 0.01
done
end=$(date +%s%N)
workers=$(grep -c '"worker_id"' "$DIR/cluster.json" || true)
echo "gs_coordinator: \`gradstream cluster\` answered $(((end - start) / 1000000)) ms after exec" \
  "($workers workers)"
