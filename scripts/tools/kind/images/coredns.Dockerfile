# scripts/tools/kind.sh builds this as one image of the registry-free kind path (context:
# bin/ with the module-built binaries, scripts/tools/kind/*.sh, the host CA bundle).
FROM scratch
COPY bin/coredns /coredns
EXPOSE 53 53/udp
ENTRYPOINT ["/coredns"]
