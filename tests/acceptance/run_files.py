"""What a task module's handlers did, for the test that runs its workers: lines appended to this
process's own file (``runs-<pid>.txt``) in the folder an environment variable names; the test
reads every file after the run, a killed or frozen worker's too."""

from __future__ import annotations

import os
import threading
from typing import IO


class RunFile:
    """One process's record file in ``$<env_var>``, opened on the first line, flushed per line."""

    def __init__(self, env_var: str) -> None:
        self.env_var = env_var
        self._lock = threading.Lock()
        self._out: IO[str] | None = None

    def write(self, line: str) -> None:
        with self._lock:
            if self._out is None:
                self._out = open(os.path.join(os.environ[self.env_var], f"runs-{os.getpid()}.txt"), "a",
                                 encoding="utf-8")
            self._out.write(line)
            self._out.flush()
