#!/usr/bin/env bash
# Whether this machine can build what the netns tests and benchmarks build:
# a network namespace holding a bridge and a veth pair shaped by tc's token
# bucket, with a command run inside. Tries exactly that on a throwaway
# namespace and removes it; being root is not enough (root in an
# unprivileged container, or in a user namespace, cannot).
#
#   scripts/netns_check.sh   # exit 0: can; exit 77 (ctest's skip code) and one line saying what is missing
set -uo pipefail

missing() {
  echo "$*"
  exit 77
}

for tool in ip tc; do
  command -v "$tool" >/dev/null 2>&1 ||
    missing "no \`$tool\` command (apt-get install iproute2)"
done

NS=gs_probe_$$
trap 'timeout 30 ip netns del "$NS" >/dev/null 2>&1' EXIT

# Runs "$@" with a deadline; on failure says `what` with the command's
# first error line, then `why`.
try() {
  local what=$1 why=$2 out
  shift 2
  out=$(timeout 30 "$@" 2>&1) ||
    missing "cannot $what ($*: $(head -n 1 <<<"${out:-timed out}"))$why"
}

try "create a network namespace" "; needs root with CAP_SYS_ADMIN and CAP_NET_ADMIN, which a non-root user and an unprivileged container lack" \
  ip netns add "$NS"
try "create a bridge in it" "" ip -n "$NS" link add gsprobebr type bridge
try "create a veth pair in it" "" ip -n "$NS" link add gsprobea type veth peer name gsprobeb
try "bring the veth up" "" ip -n "$NS" link set gsprobea up
try "shape a link with tc's token bucket" "" ip netns exec "$NS" \
  tc qdisc add dev gsprobea root tbf rate 10mbit burst 64kb latency 400ms
try "run a command in the namespace" "" ip netns exec "$NS" true
exit 0
