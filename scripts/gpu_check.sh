#!/usr/bin/env bash
# Builds the self-contained GPU bundle: everything needed to verify the GPU
# path on a machine that has a GPU but no gRPC, protobuf, Abseil or glog.
#
#   scripts/gpu_check.sh [--bundle DIR] [--build DIR] [--build-type T] [--jobs N]
#
# Here (a build host with nvcc): a Release CUDA build for sm_80 and sm_90 in
# its own build directory (default build-gpu/), then the bundle (default
# gpu-bundle/, git-ignored):
#   bin/    gs_shard gs_coordinator gs_worker gradstream (stripped)
#   tests/  the GPU tests, codec_benchmark and a few CPU tests (stripped)
#   lib/    every shared library those need except glibc and the CUDA/driver
#           stack (libcuda, cuBLAS, cuDNN come from the GPU machine)
#   python/       the gradstream package with libgradstream_c.so
#   tests/torch/  the package's GPU tests (run with the GPU machine's torch)
#   run.sh            on the GPU machine: GPU tests, GPU codec benchmark,
#                     CNN training GPU vs CPU, encode share; prints one report
#   run_cpu_tests.sh  anywhere (e.g. a bare Debian 12 container): CPU tests
# The bundle must stay <= 60 MiB so it can travel with a device `run` (carry).
#
# --build-type defaults to Release; RelWithDebInfo reuses a developer build
# (same code at -O2; the bundle is stripped either way).
# Environment: GS_GPU_ARCHS (default "80;90"), JOBS (default 2).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=$ROOT/gpu-bundle
BUILD=$ROOT/build-gpu
JOBS=${JOBS:-2}
BUILD_TYPE=Release
ARCHS=${GS_GPU_ARCHS:-80;90}
MAX_BYTES=$((60 * 1024 * 1024))
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) BUNDLE=$(realpath -m "$2"); shift ;;
    --build) BUILD=$(realpath -m "$2"); shift ;;
    --build-type) BUILD_TYPE=$2; shift ;;
    --jobs) JOBS=$2; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "gpu_check: $*" >&2; }

BINARIES=(
  server/shard/gs_shard
  server/coordinator/gs_coordinator
  worker/trainer/gs_worker
  cli/gradstream
)
# label gpu, the benchmark, then CPU tests that need neither a GPU nor the
# CUDA libraries (so they also run in a bare container).
TESTS=(
  common/codec_cuda_test
  worker/model/worker_model_gpu_test
  worker/runtime/device_pusher_test
  tests/training/training_gpu_test
  common/codec_benchmark
  common/codec_test
  worker/client/client_encode_test
  common/job/job_unit_test
  common/optim/optimizer_test
  server/shard/shard_core_test
  cli/cli_unit_test
)

if [ -f /work/env.sh ]; then
  # The shared compiler cache of this project's build hosts (paths relative
  # to the checkout, so it is entered first).
  cd "$ROOT"
  # shellcheck disable=SC1091
  . /work/env.sh
fi

log "configuring $BUILD ($BUILD_TYPE, CUDA archs $ARCHS)"
cmake -S "$ROOT" -B "$BUILD" -G Ninja "-DCMAKE_BUILD_TYPE=$BUILD_TYPE" -DGS_CUDA=ON \
  "-DCMAKE_CUDA_ARCHITECTURES=$ARCHS" >/dev/null
targets=()
for p in "${BINARIES[@]}" "${TESTS[@]}"; do targets+=("$(basename "$p")"); done
targets+=(gs_python)
log "building ${targets[*]}"
ninja -C "$BUILD" -j "$JOBS" "${targets[@]}"

log "assembling $BUNDLE"
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/bin" "$BUNDLE/tests" "$BUNDLE/lib"
for p in "${BINARIES[@]}"; do strip --strip-unneeded -o "$BUNDLE/bin/$(basename "$p")" "$BUILD/$p"; done
for p in "${TESTS[@]}"; do strip --strip-unneeded -o "$BUNDLE/tests/$(basename "$p")" "$BUILD/$p"; done
mkdir -p "$BUNDLE/python/gradstream" "$BUNDLE/tests/torch/scripts"
cp "$BUILD"/python/gradstream/*.py "$BUNDLE/python/gradstream/"
strip --strip-unneeded -o "$BUNDLE/python/gradstream/libgradstream_c.so" \
  "$BUILD/python/gradstream/libgradstream_c.so"
cp "$ROOT"/tests/torch/{cluster.py,exactness_test.py,cuda_train_test.py} "$BUNDLE/tests/torch/"
cp "$ROOT"/tests/torch/scripts/{one_step.py,cuda_train.py} "$BUNDLE/tests/torch/scripts/"

# Shared libraries from ldd, minus glibc (the loader must match the system's)
# and the CUDA/driver stack (tied to the GPU machine's driver; too big).
skip='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libresolv|libutil|libnsl|libanl)\.so'
cuda='^(libcuda|libcudart|libcublas|libcublasLt|libcudnn|libnvidia|libnvrtc|libnvJitLink)'
for f in "$BUNDLE"/bin/* "$BUNDLE"/tests/*_test "$BUNDLE"/tests/codec_benchmark \
  "$BUNDLE/python/gradstream/libgradstream_c.so"; do
  ldd "$f" | awk '/=> \// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ $name =~ $skip || $name =~ $cuda ]]; then continue; fi
  cp -L "$path" "$BUNDLE/lib/$name"
  strip --strip-unneeded "$BUNDLE/lib/$name" 2>/dev/null || true
done

cp "$ROOT/scripts/gpu_bundle/run.sh" "$ROOT/scripts/gpu_bundle/run_cpu_tests.sh" \
  "$ROOT/scripts/gpu_bundle/report.py" "$BUNDLE/"
chmod +x "$BUNDLE"/*.sh
git -C "$ROOT" rev-parse HEAD > "$BUNDLE/COMMIT" 2>/dev/null || true

bytes=$(du -sb "$BUNDLE" | cut -f1)
log "bundle: $(du -sh "$BUNDLE" | cut -f1) ($bytes bytes), $(ls "$BUNDLE/lib" | wc -l) libraries"
if [ "$bytes" -gt "$MAX_BYTES" ]; then
  log "bundle is over 60 MiB"
  exit 1
fi
echo "$BUNDLE"
