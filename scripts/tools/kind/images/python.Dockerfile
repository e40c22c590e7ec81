# Python base for the repository's Dockerfile (PYTHON_IMAGE): Debian's python3 plus the host's CA
# bundle, so pip inside `docker build` trusts a TLS-inspecting proxy.
# scripts/tools/kind.sh builds this as one image of the registry-free kind path (context:
# bin/ with the module-built binaries, scripts/tools/kind/*.sh, the host CA bundle).
ARG DEBIAN_IMAGE=tenure/debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN DEBIAN_FRONTEND=noninteractive apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && ln -sf /usr/bin/python3 /usr/local/bin/python
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
