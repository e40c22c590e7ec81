# Sourced before the test run: puts the cached tools on PATH, and points DOCKER_HOST at the
# private dockerd that scripts/tools/docker.sh starts (only when that daemon's socket exists and
# DOCKER_HOST is not already set, so a machine's own Docker engine stays the default).
export PATH="${HOME}/.cache/tenure-tools/bin:${PATH}"
if [ -z "${DOCKER_HOST:-}" ] && [ -S "${TENURE_DOCKER_DIR:-${HOME}/.cache/tenure-docker}/docker.sock" ]; then
    export DOCKER_HOST="unix://${TENURE_DOCKER_DIR:-${HOME}/.cache/tenure-docker}/docker.sock"
fi
