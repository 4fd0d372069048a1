#!/usr/bin/env bash
# Builds the Debian 12 (bookworm) base image that gradstream's images start
# from, without any container registry: debootstrap a minimal root file system
# from THIS machine's apt sources, then `docker import` it.
#
#   deploy/bootstrap_base_image.sh [--force] [--tag gradstream/debian:bookworm]
#
# Idempotent: does nothing when the tag already exists (unless --force).
# The mirror comes from the apt configuration (/etc/apt/sources.list and
# /etc/apt/sources.list.d/*.list / *.sources in deb822 form); no host name is
# written here. The image gets the same bookworm, bookworm-updates and
# bookworm-security entries the host uses, so `apt-get install` works inside.
#
# Environment:
#   GS_BASE_IMAGE    tag to create                (default gradstream/debian:bookworm)
#   GS_SUITE         Debian suite                 (default bookworm)
#   GS_APT_MIRROR    use this mirror URI instead of the one apt is configured with
#   GS_DEBOOTSTRAP_CACHE  .deb cache kept between runs (default /var/cache/gradstream/debootstrap)
#
# Needs root (debootstrap, dockerd). Takes 2-5 minutes, mostly downloads.
set -euo pipefail

log() { echo "bootstrap_base_image: $*" >&2; }

TAG=${GS_BASE_IMAGE:-gradstream/debian:bookworm}
SUITE=${GS_SUITE:-bookworm}
CACHE=${GS_DEBOOTSTRAP_CACHE:-/var/cache/gradstream/debootstrap}
FORCE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --force) FORCE=1 ;;
    --tag) TAG=$2; shift ;;
    --tag=*) TAG=${1#--tag=} ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) log "unknown argument $1"; exit 2 ;;
  esac
  shift
done

if [ "$(id -u)" != 0 ]; then
  log "run as root (debootstrap needs it)"
  exit 1
fi

HERE=$(cd "$(dirname "$0")" && pwd)
"$HERE/start_docker.sh"
DOCKER=$([ -x /usr/bin/docker ] && echo /usr/bin/docker || command -v docker)

if [ $FORCE = 0 ] && $DOCKER image inspect "$TAG" >/dev/null 2>&1; then
  log "$TAG exists ($($DOCKER image inspect -f '{{.Created}}' "$TAG")); nothing to do (--force rebuilds)"
  exit 0
fi

if ! command -v debootstrap >/dev/null 2>&1; then
  log "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q debootstrap ||
    { apt-get -o DPkg::Lock::Timeout=600 update -q &&
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q debootstrap; }
fi

# --- apt sources ----------------------------------------------------------
# Prints one line "URI SUITE COMPONENTS... [signed-by=FILE]" per enabled
# binary ("deb") source, from both the one-line and the deb822 formats.
apt_entries() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '
      /^[[:space:]]*deb[[:space:]]/ {
        sub(/^[[:space:]]*deb[[:space:]]+/, "")
        opts = ""
        if ($0 ~ /^\[/) { opts = substr($0, 2, index($0, "]") - 2); sub(/^\[[^]]*\][[:space:]]*/, "") }
        signed = ""
        n = split(opts, o, /[[:space:]]+/)
        for (i = 1; i <= n; i++) if (o[i] ~ /^signed-by=/) signed = " " o[i]
        print $0 signed
      }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # deb822: stanzas separated by blank lines; "#" lines are comments.
    awk '
      function flush() {
        if (types ~ /(^|[[:space:]])deb([[:space:]]|$)/ && tolower(enabled) != "no" && uris != "") {
          nu = split(uris, u, /[[:space:]]+/); ns = split(suites, s, /[[:space:]]+/)
          for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++)
            if (u[i] != "" && s[j] != "")
              print u[i], s[j], comps (signed != "" ? " signed-by=" signed : "")
        }
        types = uris = suites = comps = signed = ""; enabled = "yes"
      }
      BEGIN { enabled = "yes" }
      /^[[:space:]]*#/ { next }
      /^[[:space:]]*$/ { flush(); next }
      {
        line = $0; key = tolower(substr(line, 1, index(line, ":") - 1))
        val = substr(line, index(line, ":") + 1); gsub(/^[[:space:]]+|[[:space:]]+$/, "", val)
        if (key == "types") types = val
        else if (key == "uris") uris = val
        else if (key == "suites") suites = val
        else if (key == "components") comps = val
        else if (key == "enabled") enabled = val
        else if (key == "signed-by") signed = val
      }
      END { flush() }' "$f"
  done
}

ENTRIES=$(apt_entries | awk -v suite="$SUITE" '$2 == suite || index($2, suite "-") == 1')
if [ -n "${GS_APT_MIRROR:-}" ]; then
  MIRROR=$GS_APT_MIRROR
else
  MIRROR=$(echo "$ENTRIES" | awk -v suite="$SUITE" '$2 == suite { print $1; exit }')
fi
if [ -z "$MIRROR" ]; then
  log "no '$SUITE' source in /etc/apt/sources.list{,.d/*}; set GS_APT_MIRROR=URI"
  exit 1
fi
log "mirror $MIRROR (from the host's apt configuration), suite $SUITE"

# --- debootstrap ------------------------------------------------------------
WORK=$(mktemp -d /var/tmp/gradstream-rootfs.XXXXXX)
cleanup() { rm -rf --one-file-system "$WORK"; }
trap cleanup EXIT
ROOT=$WORK/rootfs
mkdir -p "$CACHE"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
KEYOPT=()
[ -f "$KEYRING" ] && KEYOPT=(--keyring="$KEYRING")
start=$SECONDS
log "debootstrap --variant=minbase $SUITE (cache $CACHE)"
debootstrap --variant=minbase --include=ca-certificates --cache-dir="$CACHE" \
  "${KEYOPT[@]}" "$SUITE" "$ROOT" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 || {
    log "debootstrap failed; last lines of its log:"
    tail -n 30 "$WORK/debootstrap.log" >&2
    exit 1
  }
log "debootstrap done in $((SECONDS - start))s"

# The image's apt sources: the host's entries for this suite (main archive,
# updates, security), in one-line form; signed-by is kept only when that
# keyring exists inside the image too.
{
  echo "# Written by deploy/bootstrap_base_image.sh from the build host's apt sources."
  echo "$ENTRIES" | while read -r uri suite rest; do
    [ -n "$uri" ] || continue
    comps="" signed=""
    for w in $rest; do
      case "$w" in
        signed-by=*) [ -f "$ROOT${w#signed-by=}" ] && signed=" [${w}]" ;;
        *) comps="$comps $w" ;;
      esac
    done
    [ -n "${GS_APT_MIRROR:-}" ] && [ "$suite" = "$SUITE" ] && uri=$GS_APT_MIRROR
    echo "deb${signed} $uri $suite${comps:- main}"
  done
} >"$ROOT/etc/apt/sources.list"
rm -f "$ROOT"/etc/apt/sources.list.d/*

# Small images: no recommends, no docs or man pages, no apt caches.
cat >"$ROOT/etc/apt/apt.conf.d/90gradstream" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Retries "3";
EOF
cat >"$ROOT/etc/dpkg/dpkg.cfg.d/90gradstream-nodoc" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
chroot "$ROOT" apt-get clean
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/log/*.log \
  "$ROOT"/usr/share/doc/*/changelog* "$ROOT"/usr/share/man/* "$ROOT"/tmp/* "$ROOT"/root/.bash_history
# The host's name and resolver must not leak into the image (docker sets both).
: >"$ROOT/etc/hostname"
: >"$ROOT/etc/resolv.conf"

log "docker import -> $TAG"
tar --numeric-owner -C "$ROOT" -c . | $DOCKER import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  --change "LABEL org.opencontainers.image.source=debootstrap org.gradstream.mirror=$MIRROR org.gradstream.suite=$SUITE" \
  - "$TAG" >/dev/null
log "$TAG ready: $($DOCKER image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}') in $((SECONDS - start))s"
