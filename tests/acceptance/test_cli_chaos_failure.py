"""`tenure chaos` that cannot reach its database ends with one line on stderr and exit 2, not a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def test_unreachable_database_is_one_line_exit_2(tmp_path: Path) -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "TENURE_DATABASE_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"),
                                         *filter(None, [env.get("PYTHONPATH")])])
    result = subprocess.run([sys.executable, "-m", "tenure.cli", "chaos", "--quiet", "--jobs", "10",
                             "--database-url", f"postgresql://u@127.0.0.1:{port}/x?connect_timeout=2",
                             "--report", str(tmp_path / "r.json")],
                            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tenure chaos: error:"), result.stderr
    assert not (tmp_path / "r.json").exists()
