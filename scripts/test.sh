#!/usr/bin/env bash
# Builds gradstream and runs every test (the README's test command).
# GPU tests skip themselves when no CUDA device is present.
#   BUILD_DIR   build directory            (default: build)
#   CTEST_ARGS  extra ctest arguments      (e.g. "-L codec" or "-LE docker")
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD_DIR" -j "$JOBS"
cd "$BUILD_DIR"
# shellcheck disable=SC2086
ctest --output-on-failure --timeout 600 -j "${CTEST_JOBS:-1}" ${CTEST_ARGS:-}
