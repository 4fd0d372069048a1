#!/usr/bin/env bash
# The layering rule (README, "Architecture"): server/, worker/ and cli/ stand
# side by side on common/, and common/ stands on nothing of theirs.
#   common/ may include  common/
#   server/ may include  common/, server/
#   worker/ may include  common/, worker/
#   cli/    may include  common/, cli/
# (generated proto headers and third-party headers are not project folders).
# tests/ and bench/ drive real processes and may include anything.
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
if [ $status -eq 0 ]; then echo "layering: ok (common <- server, worker, cli)"; fi
exit $status
