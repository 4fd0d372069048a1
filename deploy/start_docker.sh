#!/usr/bin/env bash
# Makes sure a Docker engine answers on this machine: installs Debian's
# docker.io and docker-compose (v1, `docker-compose`) when they are missing,
# starts dockerd in the background when nothing answers, and waits for
# `docker info` with a deadline. Exits non-zero when the engine cannot start,
# so callers (the end-to-end test, CI) fail instead of silently skipping.
#
#   deploy/start_docker.sh            # idempotent; prints the engine version
#
# Environment:
#   GS_DOCKERD_LOG       dockerd's log file   (default /var/log/gradstream-dockerd.log)
#   GS_DOCKER_DEADLINE   seconds to wait for the engine (default 90)
#
# Needs root (apt-get, dockerd). Machines with systemd usually run docker
# already; then this script only checks it.
set -euo pipefail

log() { echo "start_docker: $*" >&2; }

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
DOCKERD_LOG=${GS_DOCKERD_LOG:-/var/log/gradstream-dockerd.log}
DEADLINE=${GS_DOCKER_DEADLINE:-90}

# Debian's client matches Debian's daemon; a newer static client elsewhere on
# PATH (e.g. /usr/local/bin) works too, but it would need buildx for BuildKit.
docker_cli() {
  if [ -x /usr/bin/docker ]; then echo /usr/bin/docker; else command -v docker || true; fi
}

missing=()
command -v dockerd >/dev/null 2>&1 || [ -x /usr/sbin/dockerd ] || missing+=(docker.io)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -q
  $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q "${missing[@]}"
fi

DOCKER=$(docker_cli)
if [ -z "$DOCKER" ]; then
  log "no docker client after installing docker.io"
  exit 1
fi

if $DOCKER info >/dev/null 2>&1; then
  log "engine already running: $($DOCKER version --format '{{.Server.Version}}' 2>/dev/null)"
  exit 0
fi

DOCKERD=$(command -v dockerd || echo /usr/sbin/dockerd)
# A dockerd that died uncleanly leaves its pid file behind and the next one
# refuses to start; remove it only when that process is really gone.
if [ -f /var/run/docker.pid ]; then
  pid=$(cat /var/run/docker.pid 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    log "dockerd (pid $pid) is running but does not answer yet; waiting for it"
  else
    log "removing stale /var/run/docker.pid"
    $SUDO rm -f /var/run/docker.pid
    pid=""
  fi
else
  pid=""
fi

if [ -z "$pid" ]; then
  log "starting $DOCKERD (log: $DOCKERD_LOG)"
  $SUDO mkdir -p "$(dirname "$DOCKERD_LOG")"
  # setsid + nohup: the daemon outlives this script and the caller's session.
  $SUDO setsid nohup "$DOCKERD" >>"$DOCKERD_LOG" 2>&1 </dev/null &
fi

end=$((SECONDS + DEADLINE))
until $DOCKER info >/dev/null 2>&1; do
  if [ $SECONDS -ge $end ]; then
    log "the Docker engine did not answer within ${DEADLINE}s; last lines of $DOCKERD_LOG:"
    tail -n 30 "$DOCKERD_LOG" >&2 || true
    exit 1
  fi
  sleep 1
done
log "engine up: $($DOCKER version --format '{{.Server.Version}}')"
