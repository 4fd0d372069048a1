#!/usr/bin/env bash
# End-to-end test of the container deployment with a real Docker engine:
#
#   1. starts dockerd when none answers (FAILS when Docker cannot start),
#   2. bootstraps the Debian base image (deploy/bootstrap_base_image.sh),
#   3. builds the gradstream image from the binaries of the ctest build
#      directory (deploy/build_images.sh --prebuilt: no second compile),
#   4. `docker-compose up` the root docker-compose.yml with 2 shards, 2 workers,
#   5. job 1: submits with the CLI, scales to 4 workers mid-job and back down
#      to 1 through compose (+ `gradstream scale`), expects COMPLETED with
#      test accuracy >= GS_E2E_MIN_ACCURACY,
#   6. job 2: shard0's process crashes (SIGKILL from the host) mid-job: the
#      restart policy brings it back and it restores its checkpoint; then
#      `docker kill shard0` (an operator stop, which restart policies leave
#      alone) and `docker-compose start shard0`: it restores again; the job
#      completes with that accuracy.
#
# Every wait polls with its own deadline and the whole run has one too
# (GS_E2E_DEADLINE, below ctest's TIMEOUT so cleanup always runs). Containers,
# networks and volumes of the compose project are removed on every exit path.
#
#   tests/docker/docker_e2e_test.sh --build-dir build [--cli build/cli/gradstream] [--keep]
#
# Environment (all optional):
#   GS_E2E_PROJECT       compose project name          (gradstream_e2e)
#   GS_E2E_IMAGE         image tag to build and run     (gradstream/gradstream:e2e)
#   GS_E2E_STEPS         clocks of job 1                (25000)
#   GS_E2E_STEPS2        clocks of job 2                (15000)
#   GS_E2E_MIN_ACCURACY  required final test accuracy   (0.85)
#   GS_E2E_DEADLINE      seconds for the whole run      (2100)
#   GS_E2E_SKIP_BUILD=1  reuse GS_E2E_IMAGE as it is (iterating on the test)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD_DIR=""
CLI=""
KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD_DIR=$2; shift ;;
    --cli) CLI=$2; shift ;;
    --keep) KEEP=1 ;;
    *) echo "usage: $0 --build-dir DIR [--cli PATH] [--keep]" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$BUILD_DIR" ] || { echo "docker_e2e_test: --build-dir is required" >&2; exit 2; }
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
CLI=${CLI:-$BUILD_DIR/cli/gradstream}

PROJECT=${GS_E2E_PROJECT:-gradstream_e2e}
IMAGE=${GS_E2E_IMAGE:-gradstream/gradstream:e2e}
STEPS=${GS_E2E_STEPS:-25000}
STEPS2=${GS_E2E_STEPS2:-15000}
MIN_ACC=${GS_E2E_MIN_ACCURACY:-0.85}
DEADLINE=$((SECONDS + ${GS_E2E_DEADLINE:-2100}))

# --------------------------------------------------------------- reporting
T0=$SECONDS
PHASE="" PHASE_T=0
TIMINGS=()
log() { printf '[e2e %4ds] %s\n' $((SECONDS - T0)) "$*"; }
phase() {
  [ -n "$PHASE" ] && TIMINGS+=("$(printf '%-44s %5ds' "$PHASE" $((SECONDS - PHASE_T)))")
  PHASE=$1 PHASE_T=$SECONDS
  [ -n "$PHASE" ] && log "== $PHASE"
  return 0
}
print_timings() {
  phase ""
  echo "---- timings"
  printf '%s\n' "${TIMINGS[@]}"
  printf '%-44s %5ds\n' "total" $((SECONDS - T0))
}
fail() {
  log "FAIL: $*"
  exit 1
}

# ------------------------------------------------------------- docker setup
DOCKER=$([ -x /usr/bin/docker ] && echo /usr/bin/docker || command -v docker || echo docker)
# Every docker call is bounded too: a wedged engine fails the test, not CI.
compose() {
  if command -v docker-compose >/dev/null 2>&1; then
    timeout 300 docker-compose -p "$PROJECT" -f "$ROOT/docker-compose.yml" "$@"
  else
    timeout 300 $DOCKER compose -p "$PROJECT" -f "$ROOT/docker-compose.yml" "$@"
  fi
}
dock() { timeout 60 $DOCKER "$@"; }
export GS_IMAGE=$IMAGE GS_COORDINATOR_PORT=0 GS_METRICS_PORT=0 GS_WORKER_DEVICE=cpu \
  GS_HEARTBEAT_TIMEOUT=${GS_E2E_HEARTBEAT_TIMEOUT:-6s}

COMPOSE_UP=0
cleanup() {
  local rc=$?
  set +e
  if [ $COMPOSE_UP = 1 ]; then
    if [ $rc != 0 ]; then
      echo "---- compose ps"
      compose ps
      echo "---- coordinator job status"
      [ -n "${JOB:-}" ] && cli status "$JOB"
      echo "---- last log lines of every container"
      compose logs --no-color --tail=60
    fi
    if [ $KEEP = 1 ]; then
      log "--keep: leaving project $PROJECT up (docker-compose -p $PROJECT down -v)"
    else
      compose down -v --remove-orphans -t 3 >/dev/null 2>&1
      left=$($DOCKER ps -aq --filter "label=com.docker.compose.project=$PROJECT"
             $DOCKER volume ls -q --filter "label=com.docker.compose.project=$PROJECT"
             $DOCKER network ls -q --filter "label=com.docker.compose.project=$PROJECT")
      [ -n "$left" ] && { log "cleanup left resources behind: $left"; rc=1; }
    fi
  fi
  print_timings
  [ $rc = 0 ] && log "PASS" || log "FAILED (exit $rc)"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_for DESCRIPTION SECONDS COMMAND...: polls COMMAND every second until
# it succeeds; fails the test at its deadline or the run's, whichever is first.
wait_for() {
  local what=$1 secs=$2
  shift 2
  local end=$((SECONDS + secs))
  [ $end -gt $DEADLINE ] && end=$DEADLINE
  until "$@"; do
    [ $SECONDS -lt $end ] || fail "timed out after ${secs}s waiting for: $what"
    sleep 1
  done
}

# ------------------------------------------------------------------ the CLI
PORT="" METRICS=""
cli() { "$CLI" --coordinator="127.0.0.1:$PORT" --timeout=5s "$@"; }
# py EXPR: evaluates EXPR with j = the JSON object on stdin and prints it.
py() { python3 -c 'import json,sys; j=json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"; }
job_json() { cli status "$1" --json 2>/dev/null; }
job_get() { job_json "$1" | py "$2"; }
job_state() { job_get "$1" 'j.get("state","")'; }
job_active() { job_get "$1" 'j.get("active_workers",0)'; }
job_clock() { job_get "$1" 'int(j.get("progress",{}).get("clock",0))' || echo 0; }
job_summary() {
  job_json "$1" | py '"state %s, %s/%s workers, clock %s, loss %.4f, accuracy %.4f" % (j["state"], j.get("active_workers",0), j.get("desired_workers",0), j.get("progress",{}).get("clock",0), j.get("progress",{}).get("loss",0), j.get("progress",{}).get("accuracy",0))'
}
# Fails when the job ended in a state other than the ones the caller accepts.
job_not_ended() {
  local s
  s=$(job_state "$1") || return 1
  case "$s" in
    FAILED|CANCELLED) fail "job $1 is $s: $(job_get "$1" 'j.get("message","")')" ;;
    COMPLETED) fail "job $1 COMPLETED before the test could $2 (raise GS_E2E_STEPS)" ;;
  esac
}
running_with() {  # running_with JOB N: RUNNING with N active workers
  job_not_ended "$1" "${3:-see $2 active workers}"
  [ "$(job_state "$1")" = RUNNING ] && [ "$(job_active "$1")" = "$2" ]
}
clock_at_least() {  # clock_at_least JOB CLOCK [WHAT]
  job_not_ended "$1" "${3:-reach clock $2}"
  [ "$(job_clock "$1")" -ge "$2" ]
}
finished() {
  local s
  s=$(job_state "$1") || return 1
  case "$s" in
    COMPLETED) return 0 ;;
    FAILED|CANCELLED) fail "job $1 is $s: $(job_get "$1" 'j.get("message","")')" ;;
  esac
  return 1
}
check_accuracy() {
  local acc
  acc=$(job_get "$1" 'j.get("progress",{}).get("accuracy",0)')
  log "job $1: $(job_summary "$1")"
  python3 -c "import sys; sys.exit(0 if float('$acc') >= float('$MIN_ACC') else 1)" ||
    fail "job $1 accuracy $acc < $MIN_ACC"
}
cluster_ready() {  # cluster_ready SHARDS WORKERS: that many healthy of each
  cli cluster --json 2>/dev/null | py \
    'sum(s.get("healthy",False) for s in j.get("shards",[])) >= '"$1"' and sum(w.get("healthy",False) for w in j.get("workers",[])) >= '"$2" |
    grep -q True
}
containers() { compose ps -q "$1" | grep -c . || true; }
healthy() { [ "$(dock inspect -f '{{.State.Health.Status}}' "$1" 2>/dev/null)" = healthy ]; }
submit() {  # submit NAME STEPS WORKERS EXTRA_FLAGS...: prints the job id
  local name=$1 steps=$2 workers=$3
  shift 3
  cli submit --name="$name" --model=mlp --hidden=64 --dataset=synthetic --steps="$steps" \
    --batch_size=32 --optimizer=momentum --lr=0.05 --momentum=0.9 --codec=twobit \
    --consistency=sync --workers="$workers" --eval_every=200 "$@" --json | py 'j["job_id"]'
}

# =============================================================== the test
phase "docker engine (install/start)"
[ -x "$CLI" ] || fail "no CLI binary at $CLI (build the gradstream target)"
"$ROOT/deploy/start_docker.sh" || fail "the Docker engine cannot start on this machine"
$DOCKER version --format 'engine {{.Server.Version}}, client {{.Client.Version}}'

if [ "${GS_E2E_SKIP_BUILD:-0}" != 1 ]; then
  phase "bootstrap base image (debootstrap)"
  "$ROOT/deploy/bootstrap_base_image.sh"
  phase "build image from host binaries"
  "$ROOT/deploy/build_images.sh" --prebuilt "$BUILD_DIR" --tag "$IMAGE" >"$BUILD_DIR/docker_e2e_build.log" 2>&1 ||
    { tail -n 40 "$BUILD_DIR/docker_e2e_build.log"; fail "image build failed (log: $BUILD_DIR/docker_e2e_build.log)"; }
  grep -E '^(build_images|collect_runtime|install_runtime):' "$BUILD_DIR/docker_e2e_build.log" || true
fi

phase "compose up: coordinator, 2 shards, 2 workers"
compose down -v --remove-orphans -t 1 >/dev/null 2>&1 || true  # leftovers of a killed run
COMPOSE_UP=1
compose up -d --scale worker=2
PORT=$(compose port coordinator 7070 | head -n1 | sed 's/.*://')
METRICS=$(compose port coordinator 7071 | head -n1 | sed 's/.*://')
[ -n "$PORT" ] || fail "no host port for the coordinator"
log "coordinator on 127.0.0.1:$PORT, metrics on 127.0.0.1:$METRICS"
wait_for "2 healthy shards and 2 workers in 'gradstream cluster'" 120 cluster_ready 2 2
cli cluster

phase "job 1: submit, 2 workers"
JOB=$(submit e2e-scale "$STEPS" 2 --checkpoint_every=500)
log "submitted $JOB"
wait_for "job 1 RUNNING with 2 workers" 120 running_with "$JOB" 2
log "$(job_summary "$JOB")"

phase "job 1: scale to 4 workers (compose + CLI)"
compose up -d --no-deps --no-recreate --scale worker=4 worker
[ "$(containers worker)" = 4 ] || fail "compose did not start 4 workers"
cli scale "$JOB" --workers 4
wait_for "job 1 with 4 active workers" 120 running_with "$JOB" 4 "scale up to 4"
c=$(job_clock "$JOB")
wait_for "job 1 progressing with 4 workers" 60 clock_at_least "$JOB" $((c + 20)) "train with 4 workers"
log "$(job_summary "$JOB")"

phase "job 1: scale down to 1 worker (CLI + compose)"
cli scale "$JOB" --workers 1
wait_for "job 1 with 1 active worker" 120 running_with "$JOB" 1 "scale down to 1"
compose up -d --no-deps --no-recreate -t 5 --scale worker=1 worker
[ "$(containers worker)" = 1 ] || fail "compose did not stop the extra workers"
# The container compose kept may not be the job's member: then the member was
# stopped, and the coordinator gives the job the idle one after the heartbeat
# timeout. Either way the job must run on with one worker.
c=$(job_clock "$JOB")
wait_for "job 1 progressing with 1 worker" 120 clock_at_least "$JOB" $((c + 20)) "train with 1 worker"
log "$(job_summary "$JOB")"

phase "job 1: run to completion"
wait_for "job 1 COMPLETED" 900 finished "$JOB"
check_accuracy "$JOB"
curl -fsS "http://127.0.0.1:$METRICS/metrics" | grep -E "^gs_job_accuracy\{.*$JOB" ||
  fail "coordinator /metrics has no gs_job_accuracy for $JOB"

phase "containers report healthy (HEALTHCHECK)"
for svc in coordinator shard0 shard1 worker; do
  id=$(compose ps -q "$svc" | head -n1)
  wait_for "$svc container healthy" 60 healthy "$id"
done
log "coordinator, shard0, shard1, worker: healthy"

phase "job 2: submit, 2 workers, checkpoints every 500 clocks"
compose up -d --no-deps --no-recreate --scale worker=2 worker
JOB=$(submit e2e-shard-kill "$STEPS2" 2 --checkpoint_every=500)
log "submitted $JOB"
wait_for "job 2 RUNNING with 2 workers" 120 running_with "$JOB" 2
wait_for "job 2 past its first checkpoints" 180 clock_at_least "$JOB" 1200 "checkpoint"
SHARD0=$(compose ps -q shard0)
has_checkpoint() { [ -n "$(dock exec "$SHARD0" find /var/lib/gradstream/checkpoints -type f 2>/dev/null)" ]; }
wait_for "a checkpoint file in shard0's volume" 60 has_checkpoint
dock exec "$SHARD0" find /var/lib/gradstream/checkpoints -type f | head -n 5
log "$(job_summary "$JOB")"

# Two ways a shard goes down. A crash (here: SIGKILL of the container's
# process from the host, as the OOM killer would) is what compose's restart
# policy is for: Docker restarts the container by itself. `docker kill`
# instead marks the container as stopped by its operator, and Docker's
# restart policies deliberately leave it down until someone starts it again.
# Either way the shard comes back under the same name with its checkpoint
# volume and restores the job.
restored_times() { dock logs "$SHARD0" 2>&1 | grep -c "job $JOB restored from" || true; }
restored_more_than() { [ "$(restored_times)" -gt "$1" ]; }

phase "job 2: shard0 crashes (SIGKILL), restart policy, restore"
pid=$(dock inspect -f '{{.State.Pid}}' "$SHARD0")
[ -n "$pid" ] && [ "$pid" != 0 ] || fail "no host pid for shard0"
kill -9 "$pid"
log "killed shard0's process (host pid $pid) at clock $(job_clock "$JOB")"
restarted() {
  local rc running
  read -r rc running < <(dock inspect -f '{{.RestartCount}} {{.State.Running}}' "$SHARD0")
  [ "${rc:-0}" -ge 1 ] && [ "$running" = true ]
}
wait_for "shard0 restarted by its restart policy" 60 restarted
log "shard0 restarted (restart count $(dock inspect -f '{{.RestartCount}}' "$SHARD0"))"
wait_for "shard0 restoring job 2 from its checkpoint" 120 restored_more_than 0
dock logs "$SHARD0" 2>&1 | grep "job $JOB restored from"
c=$(job_clock "$JOB")
wait_for "job 2 progressing after the crash" 120 clock_at_least "$JOB" $((c + 200)) "train after the crash"
log "$(job_summary "$JOB")"

phase "job 2: docker kill shard0, compose starts it, restore"
before=$(restored_times)
dock kill "$SHARD0" >/dev/null
log "docker kill shard0 at clock $(job_clock "$JOB")"
stopped() { [ "$(dock inspect -f '{{.State.Running}}' "$SHARD0")" = false ]; }
wait_for "shard0 stopped" 30 stopped
compose start shard0
wait_for "shard0 restoring job 2 again" 120 restored_more_than "$before"
dock logs "$SHARD0" 2>&1 | grep "job $JOB restored from" | tail -n 1

phase "job 2: run to completion"
wait_for "job 2 COMPLETED" 900 finished "$JOB"
check_accuracy "$JOB"
JOB=""
phase ""
