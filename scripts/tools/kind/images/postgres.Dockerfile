# In-cluster PostgreSQL, Prometheus and Alertmanager from Debian packages.
# scripts/tools/kind.sh builds this as one image of the registry-free kind path (context:
# bin/ with the module-built binaries, scripts/tools/kind/*.sh, the host CA bundle).
ARG DEBIAN_IMAGE=tenure/debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN DEBIAN_FRONTEND=noninteractive apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15 \
 && rm -rf /var/lib/apt/lists/*
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:$PATH
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]
