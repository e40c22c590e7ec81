"""The configuration of one `tenure ui` process."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tenure.core.errors import ConfigError
from tenure.core.shutdown import SHUTDOWN_DELAY_DEFAULT, SHUTDOWN_DELAY_MAX

BIND_DEFAULT = "127.0.0.1:8080"
POOL_SIZE_DEFAULT = 6
STATEMENT_TIMEOUT_SECONDS_DEFAULT = 10.0
"""A browser query that runs longer is cancelled and answered 503 (narrow the filter)."""
FEED_POLL_SECONDS_DEFAULT = 0.5
"""The change feed looks for new jobs and new events this often (and at once on a NOTIFY)."""
PAGE_LIMIT_DEFAULT = 50
PAGE_LIMIT_MAX = 500
REPLAY_RATE_DEFAULT = 50.0
REPLAY_RATE_MAX = 1000.0
_PREFIX = re.compile(r"^(/[A-Za-z0-9._~-]+)+$")


def normalise_prefix(prefix: str | None) -> str:
    """``""`` or ``/a/b`` (no trailing slash); ConfigError for anything else."""
    if prefix is None or prefix in ("", "/"):
        return ""
    value = prefix.rstrip("/")
    if not _PREFIX.match(value):
        raise ConfigError(f"invalid prefix {prefix!r}: use a path such as /tenure (letters, digits, . _ ~ -)")
    return value


@dataclass(frozen=True)
class UiConfig:
    dsn: str
    schema: str
    bind: str = BIND_DEFAULT
    prefix: str = ""
    """Where the UI lives (``/tenure``); every page, asset and API call is under it."""
    read_only: bool = False
    """No action is offered and every mutating request gets 403, whoever asks."""
    users_file: str | None = None
    trusted_user_header: str | None = None
    pool_size: int = POOL_SIZE_DEFAULT
    statement_timeout_seconds: float = STATEMENT_TIMEOUT_SECONDS_DEFAULT
    feed_poll_seconds: float = FEED_POLL_SECONDS_DEFAULT
    shutdown_delay: float = SHUTDOWN_DELAY_DEFAULT
    """Seconds from SIGTERM to the drain, /healthz failing meanwhile (:mod:`tenure.core.shutdown`)."""

    def validate(self) -> None:
        host, _, port = self.bind.rpartition(":")
        if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ConfigError(f"--bind must be HOST:PORT, got {self.bind!r}")
        if normalise_prefix(self.prefix) != self.prefix:
            raise ConfigError(f"invalid prefix {self.prefix!r}")
        if self.trusted_user_header is not None and not re.fullmatch(r"[A-Za-z0-9-]+", self.trusted_user_header):
            raise ConfigError(f"invalid --trusted-user-header {self.trusted_user_header!r}")
        if self.pool_size < 1:
            raise ConfigError("the pool size must be >= 1")
        if not self.statement_timeout_seconds > 0 or not self.feed_poll_seconds > 0:
            raise ConfigError("timeouts must be positive")
        if not 0 <= self.shutdown_delay <= SHUTDOWN_DELAY_MAX:
            raise ConfigError(f"--shutdown-delay must be 0 to {SHUTDOWN_DELAY_MAX:g} seconds, "
                              f"got {self.shutdown_delay:g}")
