#!/usr/bin/env bash
# The layering rule (README, "Architecture"): server/, worker/ and cli/ stand
# side by side on common/, and common/ stands on nothing of theirs.
#   common/ may include  common/
#   server/ may include  common/, server/
#   worker/ may include  common/, worker/
#   cli/    may include  common/, cli/
# (generated proto headers and third-party headers are not project folders).
# tests/ and bench/ drive real processes and may include anything.
#
# The shard and the coordinator each have a core and an edge. The shard's
# core (server/shard/ but server/shard/rpc/: jobs, membership, consistency,
# optimizer calls, the pull schedule, checkpoints, the publisher) and the
# coordinator's core (server/coordinator/ but server/coordinator/rpc/: the
# job table, worker pool, shard fleet, reconcile loop, views) include no
# generated protobuf header (*.pb.h), no gRPC header, nothing of either rpc/
# folder and no project header that includes one of those, however
# indirectly: the wire, the network and the state database's rows are the
# edge's, so each core is tested and fuzzed as plain C++.
# Prints every violation as FILE:LINE: INCLUDE and exits 1 if there is one.
# ctest runs it (label lint), so CI fails when the rule is broken.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"
status=0
for layer in common server worker cli; do
  case $layer in
    common) allowed='common' ;;
    *) allowed="common|$layer" ;;
  esac
  # Project folders a #include may name; anything else is not ours to police.
  hits=$(grep -rnE --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh' \
           --include='*.inc' '^[[:space:]]*#[[:space:]]*include[[:space:]]+"(common|server|worker|cli)/' \
           "$layer" || true)
  bad=$(printf '%s\n' "$hits" | grep -vE "#[[:space:]]*include[[:space:]]+\"($allowed)/" | grep -v '^$' || true)
  if [ -n "$bad" ]; then
    echo "layering: $layer/ may include only $(echo "$allowed" | sed 's/|/\/, /g')/ headers:"
    printf '  %s\n' "$bad"
    status=1
  fi
done

# The cores. A header is "wire" when it is generated protobuf, gRPC, in an
# edge folder (server/shard/rpc/, server/coordinator/rpc/), or a project
# header that includes a wire header (computed to a fixed point over every
# project header, in one awk pass).
core_bad=$(
  find common server worker cli -type f \( -name '*.h' -o -name '*.cuh' -o -name '*.cc' \) -print0 |
    xargs -0 grep -HnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' |
    awk '
      {
        # FILE:LINE:#include "x" -> file, line, included name
        file = $0; sub(/:.*/, "", file)
        rest = substr($0, length(file) + 2)
        line = rest; sub(/:.*/, "", line)
        inc = rest; sub(/^[^<"]*[<"]/, "", inc); sub(/[>"].*/, "", inc)
        n++; F[n] = file; L[n] = line; I[n] = inc
        if (inc ~ /\.pb\.h$/ || inc ~ /^grpc(pp)?\// || inc ~ /^server\/(shard|coordinator)\/rpc\//) {
          if (!(file in wire) && file ~ /\.(h|cuh)$/) wire[file] = "includes " inc
        }
      }
      END {
        do {
          changed = 0
          for (k = 1; k <= n; k++) {
            if (F[k] ~ /\.(h|cuh)$/ && !(F[k] in wire) && (I[k] in wire)) {
              wire[F[k]] = "includes " I[k] ", which " wire[I[k]]; changed = 1
            }
          }
        } while (changed)
        for (k = 1; k <= n; k++) {
          if (F[k] !~ /^server\/(shard|coordinator)\// || F[k] ~ /^server\/(shard|coordinator)\/rpc\//) {
            continue
          }
          inc = I[k]
          if (inc ~ /\.pb\.h$/ || inc ~ /^grpc(pp)?\// || inc ~ /^server\/(shard|coordinator)\/rpc\//) {
            print F[k] ":" L[k] ": " inc " (a generated protobuf, gRPC or rpc/ header)"
          } else if (inc in wire) {
            print F[k] ":" L[k] ": " inc " (" inc " " wire[inc] ")"
          }
        }
      }' | sort -t: -k1,1 -k2,2n
)
if [ -n "$core_bad" ]; then
  echo "layering: the shard's and the coordinator's cores (server/shard/, server/coordinator/ but"
  echo "their rpc/) may include no protobuf, gRPC or rpc/ header:"
  printf '%s\n' "$core_bad" | sed 's/^/  /'
  status=1
fi
if [ $status -eq 0 ]; then
  echo "layering: ok (common <- server, worker, cli; the shard's and the coordinator's cores free" \
    "of protobuf and gRPC)"
fi
exit $status
