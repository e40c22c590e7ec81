# syntax=docker/dockerfile:1
# One image for every tenure process: `tenure operator | worker | reaper | exporter | ...`.
#   docker build -t tenure:dev .
# Stage 1 builds the package into a virtualenv; stage 2 copies only that virtualenv onto a clean
# base, runs as an unprivileged numeric user, and carries no compiler, pip or build backend.
ARG PYTHON_IMAGE=python:3.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/tenure
# Dependencies first (cached layer), then the source.
COPY pyproject.toml README.md ./
COPY src ./src
RUN /opt/tenure/bin/pip install . \
 && /opt/tenure/bin/python -m compileall -q /opt/tenure/lib \
 && /opt/tenure/bin/pip uninstall -y pip \
 && rm -rf /opt/tenure/bin/pip* /opt/tenure/bin/activate*

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="tenure" \
      org.opencontainers.image.description="PostgreSQL job queue for Kubernetes that ends zombie jobs" \
      org.opencontainers.image.source="https://github.com/tenure-dev/tenure" \
      org.opencontainers.image.licenses="Apache-2.0"
# No build tools here: drop the base image's pip/setuptools too.
RUN python -m pip uninstall -y pip setuptools wheel >/dev/null 2>&1 || true \
 && groupadd --system --gid 10001 tenure \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/tenure --create-home \
      --shell /usr/sbin/nologin tenure
COPY --from=build /opt/tenure /opt/tenure
ENV PATH=/opt/tenure/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TENURE_HOME=/tmp/tenure
WORKDIR /home/tenure
# Numeric user so that Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
# 8080: operator health (kopf /healthz), or `tenure ui` (the chart's ui.port); 9100: worker
# /metrics, /healthz, /readyz; 9324: `tenure sqs` (the chart's sqs.port).
EXPOSE 8080 9100 9324
ENTRYPOINT ["tenure"]
CMD ["--help"]
