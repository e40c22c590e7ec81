"""The bench's own embedded PostgreSQL server (shared by the runner and the standalone bench scripts)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
import psycopg

from bench.console import log

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
