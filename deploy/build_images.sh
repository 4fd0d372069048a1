#!/usr/bin/env bash
# Builds the gradstream image (one image, every role) without any registry.
#
#   deploy/build_images.sh                         # compile inside Docker (builder stage)
#   deploy/build_images.sh --prebuilt build        # reuse binaries from a host build dir
#
# Options:
#   --tag T            image tag                      (default gradstream/gradstream:latest)
#   --prebuilt DIR     copy gs_coordinator, gs_shard, gs_worker, gradstream from the
#                      CMake build directory DIR (built on this Debian 12 host)
#                      instead of compiling them again; see deploy/docker/Dockerfile
#   --base-image I     runtime base (default gradstream/debian:bookworm, bootstrapped
#                      by deploy/bootstrap_base_image.sh when missing); for GPU
#                      workers an NVIDIA CUDA + cuDNN runtime image
#   --builder-image I  image the builder stage compiles in (default: the Debian base;
#                      with --cuda ON a CUDA + cuDNN devel image)
#   --cuda OFF|ON|AUTO GS_CUDA of the in-Docker build (default OFF)
#   --jobs N           parallel compile jobs inside Docker
#   --torch            add Debian's python3 + python3-torch for script jobs
#                      (gradstream submit --entrypoint); GPU users pass their
#                      own CUDA + PyTorch image as --base-image instead
#
# Environment: DOCKER (client binary), DOCKER_BUILDKIT (0 by default: the
# classic builder works with every client; 1 is faster when BuildKit works).
# Needs root when the engine or the base image must be set up first.
set -euo pipefail

log() { echo "build_images: $*" >&2; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TAG=gradstream/gradstream:latest
PREBUILT=""
TORCH_PACKAGES=""
DEFAULT_BASE=${GS_BASE_IMAGE:-gradstream/debian:bookworm}
BASE_IMAGE=$DEFAULT_BASE
BUILDER_IMAGE=""
CUDA=OFF
JOBS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) TAG=$2; shift ;;
    --prebuilt) PREBUILT=$2; shift ;;
    --torch) TORCH_PACKAGES="python3 python3-torch" ;;
    --base-image) BASE_IMAGE=$2; shift ;;
    --builder-image) BUILDER_IMAGE=$2; shift ;;
    --cuda) CUDA=$2; shift ;;
    --jobs) JOBS=$2; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) log "unknown argument $1 (see --help)"; exit 2 ;;
  esac
  shift
done
BUILDER_IMAGE=${BUILDER_IMAGE:-$BASE_IMAGE}

"$ROOT/deploy/start_docker.sh"
DOCKER=${DOCKER:-$([ -x /usr/bin/docker ] && echo /usr/bin/docker || command -v docker)}
export DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0}

# The default base is made locally; any other base must already be present
# (docker load / a registry the user has).
for img in "$BASE_IMAGE" "$BUILDER_IMAGE"; do
  if [ "$img" = "$DEFAULT_BASE" ]; then
    "$ROOT/deploy/bootstrap_base_image.sh" --tag "$DEFAULT_BASE"
  fi
done

start=$SECONDS
if [ -n "$PREBUILT" ]; then
  PREBUILT=$(cd "$PREBUILT" && pwd)
  bins=()
  for rel in server/coordinator/gs_coordinator server/shard/gs_shard \
             worker/trainer/gs_worker cli/gradstream; do
    if [ ! -x "$PREBUILT/$rel" ]; then
      log "$PREBUILT/$rel is missing: build it first (cmake --build $PREBUILT --target $(basename "$rel"))"
      exit 1
    fi
    bins+=("$PREBUILT/$rel")
  done
  # A small temporary context: the Dockerfile's helper files and what
  # collect_runtime.sh gathers, instead of the repository (the classic
  # builder would upload all of it).
  CTX=$(mktemp -d /var/tmp/gradstream-ctx.XXXXXX)
  trap 'rm -rf "$CTX"' EXIT
  mkdir -p "$CTX/deploy/docker/prebuilt"
  cp "$ROOT"/deploy/docker/{Dockerfile,install_runtime.sh,gs-healthcheck,collect_runtime.sh} \
    "$CTX/deploy/docker/"
  cp "$ROOT/deploy/docker/prebuilt/README.md" "$CTX/deploy/docker/prebuilt/"
  "$ROOT/deploy/docker/collect_runtime.sh" "$CTX/deploy/docker/prebuilt" "${bins[@]}"
  # The Python package for script jobs, when the build has it (gs_python).
  if [ -f "$PREBUILT/python/gradstream/libgradstream_c.so" ]; then
    mkdir -p "$CTX/deploy/docker/prebuilt/share/gradstream"
    cp -r "$PREBUILT/python" "$CTX/deploy/docker/prebuilt/share/gradstream/python"
  fi
  log "image $TAG from the binaries in $PREBUILT (context $(du -sh "$CTX" | cut -f1))"
  $DOCKER build -f "$CTX/deploy/docker/Dockerfile" --target prebuilt \
    --build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg TORCH_PACKAGES="$TORCH_PACKAGES" \
    -t "$TAG" "$CTX"
else
  log "image $TAG compiled inside Docker (GS_CUDA=$CUDA; base $BASE_IMAGE, builder $BUILDER_IMAGE)"
  $DOCKER build -f "$ROOT/deploy/docker/Dockerfile" --target runtime \
    --build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg BUILDER_IMAGE="$BUILDER_IMAGE" \
    --build-arg GS_CUDA="$CUDA" --build-arg JOBS="$JOBS" \
    --build-arg TORCH_PACKAGES="$TORCH_PACKAGES" -t "$TAG" "$ROOT"
fi
size=$($DOCKER image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}')
log "$TAG built in $((SECONDS - start))s ($size)"
