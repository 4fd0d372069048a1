#!/usr/bin/env bash
# Gathers what a runtime image needs to run the given binaries:
#   OUT/bin/NAME                 each binary, stripped of debug info
#   OUT/runtime-packages.txt     the Debian/Ubuntu packages that own their
#                                shared libraries (ldd + dpkg -S), one per line
#   OUT/lib/                     shared libraries no package owns (e.g. a CUDA
#                                toolkit unpacked under /usr/local/cuda), copied
#
#   deploy/docker/collect_runtime.sh OUT BINARY...
#
# Used in two places with the same result: inside the Dockerfile's builder
# stage, and by deploy/build_images.sh --prebuilt on a host whose build
# directory already has the binaries. Deriving the package list from the
# binaries keeps it exact on any base (Debian 12 here, the Ubuntu of an NVIDIA
# CUDA image elsewhere) instead of a hand-kept list of versioned names.
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 OUT BINARY..." >&2
  exit 2
fi
OUT=$1
shift
mkdir -p "$OUT/bin" "$OUT/lib"
: >"$OUT/runtime-packages.txt.tmp"

libs=()
for bin in "$@"; do
  if [ ! -x "$bin" ]; then
    echo "collect_runtime: $bin is not an executable" >&2
    exit 1
  fi
  name=$(basename "$bin")
  if command -v strip >/dev/null 2>&1; then
    strip --strip-debug -o "$OUT/bin/$name" "$bin"
  else
    cp "$bin" "$OUT/bin/$name"
  fi
  chmod 0755 "$OUT/bin/$name"
  # "libfoo.so.1 => /path/libfoo.so.1 (0x...)"; "not found" is an error.
  deps=$(ldd "$bin")
  if echo "$deps" | grep -q "not found"; then
    echo "collect_runtime: $bin has unresolved libraries:" >&2
    echo "$deps" | grep "not found" >&2
    exit 1
  fi
  while read -r lib; do libs+=("$lib"); done < <(echo "$deps" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }')
done
mapfile -t libs < <(printf '%s\n' "${libs[@]}" | sort -u)

# Which package owns each library: one dpkg-query call for all of them (it
# reads the whole dpkg database per call). Debian 12 is usr-merged, so dpkg
# may know a file under /lib or /usr/lib, by its link name or its target.
declare -A owner=()
cands=()
for lib in "${libs[@]}"; do
  real=$(readlink -f "$lib")
  cands+=("$lib" "/usr$lib" "${lib#/usr}" "$real" "/usr$real" "${real#/usr}")
done
while IFS= read -r line; do
  path=${line#*: }
  pkg=${line%%: *}
  pkg=${pkg%%,*}
  owner[$path]=${pkg%%:*}
done < <(dpkg-query -S "${cands[@]}" 2>/dev/null | grep -v '^diversion' || true)

for lib in "${libs[@]}"; do
  real=$(readlink -f "$lib")
  pkg=""
  for c in "$lib" "/usr$lib" "${lib#/usr}" "$real" "/usr$real" "${real#/usr}"; do
    if [ -n "${owner[$c]:-}" ]; then pkg=${owner[$c]}; break; fi
  done
  if [ -n "$pkg" ]; then
    echo "$pkg" >>"$OUT/runtime-packages.txt.tmp"
  else
    base=$(basename "$lib")
    [ -e "$OUT/lib/$base" ] || cp -L "$lib" "$OUT/lib/$base"
  fi
done
sort -u "$OUT/runtime-packages.txt.tmp" >"$OUT/runtime-packages.txt"
rm -f "$OUT/runtime-packages.txt.tmp"
echo "collect_runtime: $(wc -l <"$OUT/runtime-packages.txt") packages," \
  "$(find "$OUT/lib" -type f | wc -l) bundled libraries ($(du -sh "$OUT/lib" | cut -f1))" >&2
