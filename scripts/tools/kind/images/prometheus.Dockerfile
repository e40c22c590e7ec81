# scripts/tools/kind.sh builds this as one image of the registry-free kind path (context:
# bin/ with the module-built binaries, scripts/tools/kind/*.sh, the host CA bundle).
ARG DEBIAN_IMAGE=tenure/debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN DEBIAN_FRONTEND=noninteractive apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \
 && rm -rf /var/lib/apt/lists/*
USER 65534:65534
ENTRYPOINT ["/usr/bin/prometheus"]
