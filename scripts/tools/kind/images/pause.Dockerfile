# scripts/tools/kind.sh builds this as one image of the registry-free kind path (context:
# bin/ with the module-built binaries, scripts/tools/kind/*.sh, the host CA bundle).
FROM scratch
COPY bin/pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]
