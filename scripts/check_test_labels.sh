#!/usr/bin/env bash
# Every ctest entry carries a label, so the tiers (README, "Testing") hold:
# `unit` for what scripts/test.sh --fast runs, the others for the rest.
# Prints each entry without one and exits 1 if there is one. ctest runs it
# (label lint).
#   scripts/check_test_labels.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: check_test_labels.sh BUILD_DIR}
# ctest -N rewrites BUILD_DIR/Testing/Temporary/LastTest.log, the log of the
# ctest run this check is part of; read a copy of the test files instead.
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
(cd "$build" && find . -name CTestTestfile.cmake -print0 | tar --null -T - -cf -) | tar -xf - -C "$copy"
cd "$copy"
ctest --show-only=json-v1 | python3 -c '
import json, sys
tests = json.load(sys.stdin)["tests"]
bare = [t["name"] for t in tests
        if not any(p["name"] == "LABELS" and p["value"] for p in t.get("properties", []))]
for name in bare:
    print("%s: no ctest label (LABELS unit, or loopback, shard, faults, ...)" % name)
print("%d of %d ctest entries without a label" % (len(bare), len(tests)))
sys.exit(1 if bare else 0)'
