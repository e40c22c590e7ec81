"""The bench's own embedded PostgreSQL server, and the code under test (shared by the runner and
the experiments in bench/experiments/).

The code under test: ``add_before_src`` gives a command line the ``--before-src DIR`` option
(an older copy of tenure's sources, e.g. ``git archive REV src | tar -x -C DIR``) and
``code_env`` the environment of a subprocess that runs those sources (or this checkout's)
with this checkout's ``bench`` importable: how every before/after comparison is made.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import psycopg

from bench.console import log

ROOT = Path(__file__).resolve().parent.parent
"""This checkout: ``bench/`` and ``src/`` are in it."""
DATADIR_DEFAULT = Path(os.environ.get("TENURE_BENCH_HOME", Path.home() / ".cache" / "tenure-bench")) / "pgdata"


# -- server -----------------------------------------------------------------------------------
def processes_cpu(procs: Sequence[psutil.Process]) -> float:
    """CPU seconds (user+system) of these processes so far; one that has exited counts 0."""
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


@dataclass
class Server:
    admin_dsn: str
    port: int
    postmaster_pid: int

    def dsn(self, db: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{db}"

    def fresh_db(self, name: str) -> str:
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        dsn = self.dsn(name)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        return dsn

    def backend_cpu(self) -> float:
        """CPU seconds (user+system) of the postmaster and all its children so far."""
        try:
            root = psutil.Process(self.postmaster_pid)
            return processes_cpu([root, *root.children(recursive=True)])
        except psutil.Error:
            return 0.0


def start_server(datadir: Path) -> Server:
    """The bench's own embedded server, with pg_stat_statements preloaded (restart once if needed)."""
    from tenure.core.embedded import ensure_server
    server = ensure_server(datadir)
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        row = conn.execute("SHOW shared_preload_libraries").fetchone()
        if row is None or "pg_stat_statements" not in str(row[0]):
            conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
            restart = True
        else:
            restart = False
    if restart:
        server.stop()
        server.start()
    pid = int((server.datadir / "postmaster.pid").read_text().splitlines()[0])
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        settings = {r[0]: r[1] for r in conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('fsync','synchronous_commit','shared_buffers','server_version','shared_preload_libraries')")}
    log(f"embedded PostgreSQL {settings.get('server_version')} on port {server.port} "
        f"(fsync={settings.get('fsync')}, synchronous_commit={settings.get('synchronous_commit')})")
    return Server(server.dsn, server.port, pid)


# -- the code under test ----------------------------------------------------------------------
def before_src(text: str) -> Path:
    """``--before-src``'s type: the absolute directory holding the older ``tenure`` package,
    given as that directory (``DIR/src``) or as the checkout or archive above it (``DIR``)."""
    path = Path(text).expanduser().resolve()
    for src in (path, path / "src"):
        if (src / "tenure").is_dir():
            return src
    raise argparse.ArgumentTypeError(f"{text}: no tenure package in it or in its src/ "
                                     "(make one with `git archive REV src | tar -x -C DIR`)")


class _BeforeSrc(argparse.Action):
    """Stores ``--before-src``; a deprecated alias (the runner's ``--base-src``) still works, with a note."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if option_string is not None and option_string != "--before-src":
            log(f"note: {option_string} is the former name of --before-src")
        setattr(namespace, self.dest, values)


def add_before_src(parser: argparse.ArgumentParser, help: str, *, aliases: Sequence[str] = (),
                   default: Path | None = None) -> None:
    """Add ``--before-src DIR`` (``args.before_src``: an absolute ``src`` directory, or ``default``)
    to ``parser``; ``aliases`` are deprecated spellings that still parse (only the runner's
    documented ``--base-src``)."""
    parser.add_argument("--before-src", *aliases, dest="before_src", action=_BeforeSrc, type=before_src,
                        default=default, metavar="DIR",
                        help=help + ("" if not aliases else f" ({', '.join(aliases)}: its former name)"))


def code_env(src: Path | None = None, *, base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The environment of a subprocess running the tenure in ``src`` (the "before" run; None: the
    tenure this interpreter finds, this checkout's) with this checkout's ``bench`` importable:
    ``base`` (default ``os.environ``) plus ``extra``, with ``PYTHONPATH`` = ``src``, this
    checkout, then the inherited ``PYTHONPATH``."""
    env = {**(os.environ if base is None else base), **extra}
    parts = [str(src.resolve())] if src is not None else []
    parts += [str(ROOT), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


def rerun_before(src: Path | None, module: str, argv: Sequence[str] | None = None) -> int | None:
    """For an experiment that measures the tenure it imports: with ``--before-src`` given (``src``),
    run ``python -m MODULE ARGV`` again (``argv`` default ``sys.argv[1:]``, less ``--before-src``)
    in ``code_env(src)`` and return its exit code; None (measure here) without it."""
    if src is None:
        return None
    rest: list[str] = []
    args = list(sys.argv[1:] if argv is None else argv)
    while args:
        arg = args.pop(0)
        if arg == "--before-src":
            args = args[1:]
        elif not arg.startswith("--before-src="):
            rest.append(arg)
    log(f"measuring the tenure in {src}")
    return subprocess.run([sys.executable, "-m", module, *rest], cwd=ROOT, env=code_env(src)).returncode
