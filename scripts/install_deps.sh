#!/usr/bin/env bash
# Installs every Debian 12 package gradstream needs to build and test.
# Idempotent: apt-get skips what is already installed. Run as root (or with sudo).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
PKGS=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgoogle-glog-dev libgflags-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcpp-httplib-dev libeigen3-dev libssl-dev openssl zlib1g-dev
  libsqlite3-dev  # the coordinator's state (server/coordinator/rpc/state_store.h)
  nlohmann-json3-dev  # JSON the CLI writes by hand otherwise (health --json)
  dataset-fashion-mnist  # real data: worker_data_test and the convergence test use it
  clang llvm iproute2 python3 procps gnuplot-nox
  python3-grpcio python3-grpc-tools  # tests/security/hostile_test.py: a second client
  python3-torch python3-pip python3-setuptools  # the PyTorch package (python/) and its tests
  fortunes  # bench/tta: the language model's text corpus (/usr/share/games/fortunes)
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "install_deps: all packages present"
fi
