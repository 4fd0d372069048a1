#!/usr/bin/env bash
# Builds the libFuzzer targets with clang + ASan + UBSan and runs each for a
# bounded time. Fails on any crash, sanitizer report or violated property.
#   ./scripts/fuzz.sh [seconds-per-target]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DGS_FUZZ=ON \
  -DGS_SANITIZE=address,undefined -DGS_BUILD_TESTS=OFF -DGS_BUILD_BENCHMARKS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="-fno-sanitize-recover=all"
targets=(codec_fuzzer)
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${targets[@]}"
for t in "${targets[@]}"; do
  corpus="$BUILD_DIR/corpus-$t"
  mkdir -p "$corpus"
  echo "fuzz: $t for ${SECONDS_PER_TARGET}s"
  "$BUILD_DIR/common/$t" -max_total_time="$SECONDS_PER_TARGET" -max_len=4096 \
    -artifact_prefix="$BUILD_DIR/" \
    -print_final_stats=1 "$corpus" 2>&1 | tail -n 15
done
echo "fuzz: no findings"
