#!/bin/sh
# Runs inside the image build (as root) and finishes what deploy/docker/
# collect_runtime.sh gathered; the Dockerfile COPYs it straight to its final
# place, DIR=/opt/gradstream, so no layer holds a second copy.
#
#   install_runtime.sh packages DIR   apt-get install DIR/runtime-packages.txt
#   install_runtime.sh finish DIR     register DIR/lib with ld.so, then check
#                                     that every DIR/bin/* resolves its libraries
#   install_runtime.sh torch "PKGS"   apt-get install PKGS (script jobs' Python
#                                     and torch); nothing when PKGS is empty
#
# Two steps so the package layer stays cached while only the binaries change.
# A DIR without runtime-packages.txt is not an error: the classic builder runs
# the unused "prebuilt" stage of a from-source build too, with nothing in it.
set -eu
MODE=$1
DIR=$2
if [ "$MODE" = torch ]; then
  [ -n "$DIR" ] || { echo "install_runtime: no torch packages asked for"; exit 0; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # shellcheck disable=SC2086  # a list of packages
  apt-get install -y -q --no-install-recommends $DIR
  apt-get clean
  rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log
  exit 0
fi
if [ ! -f "$DIR/runtime-packages.txt" ]; then
  echo "install_runtime: nothing in $DIR (fine for a stage this build does not use)"
  exit 0
fi
case "$MODE" in
  packages)
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    # shellcheck disable=SC2046
    apt-get install -y -q --no-install-recommends $(cat "$DIR/runtime-packages.txt")
    apt-get clean
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log
    ;;
  finish)
    if [ -n "$(ls -A "$DIR/lib" 2>/dev/null)" ]; then
      echo "$DIR/lib" >/etc/ld.so.conf.d/gradstream.conf
      ldconfig
    fi
    for b in "$DIR"/bin/*; do
      if ldd "$b" | grep "not found"; then
        echo "install_runtime: $b misses libraries" >&2
        exit 1
      fi
    done
    echo "install_runtime: $(ls "$DIR/bin" | tr '\n' ' ')ready"
    ;;
  *)
    echo "usage: install_runtime.sh packages|finish DIR" >&2
    exit 2
    ;;
esac
