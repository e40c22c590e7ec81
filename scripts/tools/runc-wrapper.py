#!/usr/bin/env python3
"""runc wrapper for hosts whose capability bounding set lacks CAP_SYS_RESOURCE.

Purpose: on such hosts (some sandboxed VMs) `docker run --privileged`, kind's node containers and
pods that ask for a negative oom_score_adj or raised rlimits fail with
"unable to apply caps: operation not permitted" or "can't get final child's PID from pipe: EOF".
Before `runc create`/`runc run` this wrapper edits the bundle's OCI config.json (and before
`runc exec --process FILE`, that process spec):
  - drops CAP_SYS_RESOURCE from every capability set;
  - drops a negative process.oomScoreAdj;
  - clamps each rlimit to the current hard limit;
then execs the real runc ($REAL_RUNC, default /usr/sbin/runc, else runc on PATH).

Limits: a normal machine does not need it: the wrapper changes nothing where the bounding set has
CAP_SYS_RESOURCE, and scripts/tools/docker.sh only registers it when
CAP_SYS_RESOURCE is missing from the bounding set. Containers run without CAP_SYS_RESOURCE, which
is all the host could grant them anyway. The kind node image built by scripts/tools/kind.sh
installs the same file as its containerd's runc for the same reason.
"""
import json
import os
import resource
import shutil
import sys


def _bundle(args: list[str]) -> str:
    for flag in ("--bundle", "-b"):
        if flag in args:
            return args[args.index(flag) + 1]
    return "."


def _patch(path: str, whole_spec: bool = True) -> None:
    with open(path) as f:
        spec = json.load(f)
    proc = spec.get("process", {}) if whole_spec else spec
    caps = proc.get("capabilities", {})
    for kind, values in caps.items():
        caps[kind] = [c for c in values if c != "CAP_SYS_RESOURCE"]
    if proc.get("oomScoreAdj", 0) < 0:
        proc.pop("oomScoreAdj")
    for rl in proc.get("rlimits", []):
        name = rl["type"]
        if not hasattr(resource, name):
            continue
        _soft, hard = resource.getrlimit(getattr(resource, name))
        if hard != resource.RLIM_INFINITY:
            rl["hard"] = min(rl["hard"], hard)
            rl["soft"] = min(rl["soft"], rl["hard"])
    with open(path, "w") as f:
        json.dump(spec, f)


def _lacks_sys_resource() -> bool:
    """True when CAP_SYS_RESOURCE (bit 24) is missing from this process's bounding set."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapBnd:"):
                return not (int(line.split()[1], 16) >> 24) & 1
    return False


def main() -> None:
    args = sys.argv[1:]
    if ("create" in args or "run" in args) and _lacks_sys_resource():
        config = os.path.join(_bundle(args), "config.json")
        if os.path.exists(config):
            _patch(config)
    elif "exec" in args and _lacks_sys_resource():
        # `runc exec --process FILE` (docker exec, crictl exec): FILE is a bare process spec.
        for flag in ("--process", "-p"):
            if flag in args and os.path.exists(args[args.index(flag) + 1]):
                _patch(args[args.index(flag) + 1], whole_spec=False)
                break
    real = os.environ.get("REAL_RUNC", "")
    if not real:
        for candidate in ("/usr/sbin/runc", "/usr/local/sbin/runc.real", "/usr/bin/runc"):
            if os.access(candidate, os.X_OK):
                real = candidate
                break
        else:
            real = shutil.which("runc") or "runc"
    os.execv(real, ["runc", *args])


if __name__ == "__main__":
    main()
