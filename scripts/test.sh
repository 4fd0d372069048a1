#!/usr/bin/env bash
# Builds gradstream and runs its tests (the README's test command; see its
# "Testing" section for the tiers and labels).
#   scripts/test.sh          everything: builds all targets, runs every ctest entry (CI)
#   scripts/test.sh --fast   the unit tier: builds only its tests (target
#                            gs_unit_tests), runs ctest -L unit
# A test that needs what this machine lacks (a CUDA device, network
# namespaces, torch) skips itself; the reasons are printed at the end.
#   BUILD_DIR   build directory            (default: build)
#   CTEST_ARGS  extra ctest arguments      (e.g. "-L shard" or "-LE docker|netns")
#   JOBS        build jobs                 (default: nproc)
#   CTEST_JOBS  tests run at once          (default: 1)
set -euo pipefail
cd "$(dirname "$0")/.."
FAST=0
case "${1:-}" in
  "") ;;
  --fast) FAST=1 ;;
  *) echo "usage: $0 [--fast]" >&2; exit 2 ;;
esac
./scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [ $FAST = 1 ]; then
  cmake --build "$BUILD_DIR" -j "$JOBS" --target gs_unit_tests
  TIER=(-L unit)
else
  cmake --build "$BUILD_DIR" -j "$JOBS"
  TIER=()
fi
cd "$BUILD_DIR"
status=0
# shellcheck disable=SC2086
ctest --output-on-failure --timeout 600 -j "${CTEST_JOBS:-1}" "${TIER[@]}" ${CTEST_ARGS:-} \
  --output-junit Testing/results.xml || status=$?
# ctest names the skipped entries but not why; each printed its reason on a "SKIP:" line.
[ -f Testing/results.xml ] && python3 - Testing/results.xml <<'PY'
import sys, xml.etree.ElementTree as ET
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    skipped = case.find("skipped")
    if skipped is not None:
        out = case.findtext("system-out") or ""
        why = [l[5:].strip() for l in out.splitlines() if l.startswith("SKIP:")]
        print("skipped %s: %s" % (case.get("name"), why[-1] if why else skipped.get("message")))
PY
exit $status
