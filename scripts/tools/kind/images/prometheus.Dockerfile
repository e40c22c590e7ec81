# scripts/tools/kind.sh builds this as one image of the registry-free kind path (context:
# bin/ with the module-built binaries, scripts/tools/kind/*.sh, the host CA bundle).
# Prometheus is built from its Go module with the Kubernetes discovery plugin: Debian's
# package lacks kubernetes_sd_configs.
ARG DEBIAN_IMAGE=tenure/debian:bookworm
FROM ${DEBIAN_IMAGE}
COPY bin/prometheus /usr/bin/prometheus
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
RUN chmod 755 /usr/bin/prometheus && mkdir -p /prometheus && chown 65534:65534 /prometheus \
 && /usr/bin/prometheus --version
USER 65534:65534
ENTRYPOINT ["/usr/bin/prometheus"]
