# scripts/tools/kind.sh builds this as one image of the registry-free kind path (context:
# bin/ with the module-built binaries, scripts/tools/kind/*.sh, the host CA bundle).
ARG DEBIAN_IMAGE=tenure/debian:bookworm
FROM ${DEBIAN_IMAGE}
COPY bin/kube-controller-manager /usr/local/bin/kube-controller-manager
