#!/usr/bin/env bash
# Make a Docker engine answer, idempotently, for the kind suite (e2e/kind) and scripts/tools/kind.sh.
#   1. If `docker info` already answers (DOCKER_HOST or the default socket), use that engine.
#   2. Else install Debian's docker.io with apt if dockerd is missing (apt-get update first), and
#      start a private dockerd whose data root, exec root, socket, pid file and log live under
#      ${TENURE_DOCKER_DIR:-$HOME/.cache/tenure-docker}. scripts/tools/env.sh exports
#      DOCKER_HOST=unix://$TENURE_DOCKER_DIR/docker.sock when that socket exists.
# Workaround, only on hosts whose capability bounding set lacks CAP_SYS_RESOURCE (some sandboxed
# VMs; a normal machine has it and runs dockerd unchanged): dockerd gets the runc wrapper
# scripts/tools/runc-wrapper.py as its default runtime (`--add-runtime tenure-runc=PATH
# --default-runtime tenure-runc`), otherwise privileged containers such as kind's nodes fail with
# "unable to apply caps: operation not permitted".
# Prints the DOCKER_HOST to use as its last line. Needs root to install and start dockerd.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${TENURE_DOCKER_DIR:-$HOME/.cache/tenure-docker}"
sock="$dir/docker.sock"
log() { echo "docker.sh: $*" >&2; }

capbnd="$(awk '/^CapBnd:/ {print $2}' /proc/self/status)"
lacks_sys_resource=0
if (( (16#$capbnd >> 24 & 1) == 0 )); then
    lacks_sys_resource=1
    # Keep the installed wrapper current even when our dockerd already runs (it execs it per call).
    mkdir -p "$dir/bin"
    install -m 0755 "$here/runc-wrapper.py" "$dir/bin/tenure-runc"
fi
if [[ -z "${DOCKER_HOST:-}" && -S "$sock" ]]; then export DOCKER_HOST="unix://$sock"; fi
if command -v docker >/dev/null 2>&1 && timeout 20 docker info >/dev/null 2>&1; then
    log "a Docker engine answers at ${DOCKER_HOST:-the default socket}"
    echo "${DOCKER_HOST:-unix:///var/run/docker.sock}"
    exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
    log "installing docker.io (apt)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # policy-rc.d keeps the package's postinst from starting the system service; we start our own.
    policy=/usr/sbin/policy-rc.d created=0
    if [[ ! -e $policy ]]; then printf '#!/bin/sh\nexit 101\n' > $policy; chmod +x $policy; created=1; fi
    apt-get install -y -qq --no-install-recommends docker.io iptables >/dev/null
    if ((created)); then rm -f $policy; fi
fi
command -v docker >/dev/null 2>&1 || { log "docker CLI missing after install"; exit 1; }

mkdir -p "$dir/data" "$dir/exec" "$dir/bin"
args=(--data-root "$dir/data" --exec-root "$dir/exec" -H "unix://$sock"
      --pidfile "$dir/dockerd.pid" --storage-driver overlay2)
if ((lacks_sys_resource)); then
    # CAP_SYS_RESOURCE (bit 24) missing from the bounding set: use the wrapper.
    args+=(--add-runtime "tenure-runc=$dir/bin/tenure-runc" --default-runtime tenure-runc)
    log "CAP_SYS_RESOURCE is not in the bounding set: runc wrapper $dir/bin/tenure-runc is the default runtime"
fi
if [[ -f "$dir/dockerd.pid" ]] && kill -0 "$(cat "$dir/dockerd.pid")" 2>/dev/null; then
    log "dockerd (pid $(cat "$dir/dockerd.pid")) runs but does not answer; waiting"
else
    rm -f "$dir/dockerd.pid" "$sock"
    log "starting dockerd (log $dir/dockerd.log)"
    nohup setsid dockerd "${args[@]}" >>"$dir/dockerd.log" 2>&1 </dev/null &
fi
export DOCKER_HOST="unix://$sock"
for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
        log "dockerd answers at $DOCKER_HOST"
        echo "$DOCKER_HOST"
        exit 0
    fi
    sleep 1
done
log "dockerd did not answer within 60 s; last log lines:"
tail -n 20 "$dir/dockerd.log" >&2 || true
exit 1
