"""The operator's own settings (per-queue settings live in each JobQueue spec) and their
environment variables, as the chart's operator Deployment sets them."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from tenure.core.errors import ConfigError
from tenure.operator.kube import FIELD_MANAGER_DEFAULT

INTERVAL_SECONDS_DEFAULT = 10.0
BACKOFF_MAX_SECONDS_DEFAULT = 300.0
STATS_CONNECT_TIMEOUT_SECONDS_DEFAULT = 5
MANAGE_MIGRATIONS_DEFAULT = True
MIGRATION_RETRY_SECONDS_DEFAULT = 300.0
ENV_INTERVAL = "TENURE_OPERATOR_INTERVAL_SECONDS"
ENV_BACKOFF_MAX = "TENURE_OPERATOR_BACKOFF_MAX_SECONDS"
ENV_MANAGE_MIGRATIONS = "TENURE_OPERATOR_MANAGE_MIGRATIONS"
ENV_MIGRATION_RETRY = "TENURE_OPERATOR_MIGRATION_RETRY_SECONDS"


@dataclasses.dataclass(frozen=True)
class OperatorConfig:
    """Operator-wide settings (per-queue settings live in each JobQueue spec)."""

    #: Seconds between timer passes (stats read + scaling decision) for each JobQueue.
    interval_seconds: float = INTERVAL_SECONDS_DEFAULT
    #: Ceiling of the retry delay after failures (the delay doubles from interval_seconds).
    backoff_max_seconds: float = BACKOFF_MAX_SECONDS_DEFAULT
    #: connect_timeout added to the DSN when reading stats, so a dead DB cannot hang a pass.
    stats_connect_timeout_seconds: int = STATS_CONNECT_TIMEOUT_SECONDS_DEFAULT
    #: Server-side-apply field manager owning the children's fields.
    field_manager: str = FIELD_MANAGER_DEFAULT
    #: Run migration Jobs for JobQueues that ask for them (spec.migrations.managed); False
    #: turns managed migrations off cluster-wide (the chart's operator.manageMigrations).
    manage_migrations: bool = MANAGE_MIGRATIONS_DEFAULT
    #: Seconds a failed migration Job is kept (and reported) before it is deleted and run again
    #: (a schema newer than the code is never retried: only a new image fixes it).
    migration_retry_seconds: float = MIGRATION_RETRY_SECONDS_DEFAULT

    def validate(self) -> None:
        if self.migration_retry_seconds < 0:
            raise ConfigError("migration_retry_seconds must be >= 0")
        if not self.interval_seconds > 0:
            raise ConfigError(f"interval_seconds must be > 0, got {self.interval_seconds}")
        if self.backoff_max_seconds < self.interval_seconds:
            raise ConfigError("backoff_max_seconds must be >= interval_seconds")
        if self.stats_connect_timeout_seconds < 1:
            raise ConfigError("stats_connect_timeout_seconds must be >= 1")
        if not self.field_manager:
            raise ConfigError("field_manager must not be empty")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OperatorConfig:
        """Read ``TENURE_OPERATOR_INTERVAL_SECONDS``, ``..._BACKOFF_MAX_SECONDS``,
        ``..._MANAGE_MIGRATIONS`` and ``..._MIGRATION_RETRY_SECONDS``; ConfigError on bad values."""
        env = os.environ if env is None else env
        try:
            interval = float(env.get(ENV_INTERVAL, INTERVAL_SECONDS_DEFAULT))
            backoff = float(env.get(ENV_BACKOFF_MAX, BACKOFF_MAX_SECONDS_DEFAULT))
            retry = float(env.get(ENV_MIGRATION_RETRY, MIGRATION_RETRY_SECONDS_DEFAULT))
        except ValueError as exc:
            raise ConfigError(
                f"{ENV_INTERVAL}/{ENV_BACKOFF_MAX}/{ENV_MIGRATION_RETRY}: {exc}"
            ) from exc
        manage_text = env.get(ENV_MANAGE_MIGRATIONS, "true").strip().lower()
        if manage_text not in ("true", "false", "1", "0"):
            raise ConfigError(f"{ENV_MANAGE_MIGRATIONS} must be true or false, got {manage_text!r}")
        config = cls(
            interval_seconds=interval,
            backoff_max_seconds=max(backoff, interval),
            manage_migrations=manage_text in ("true", "1"),
            migration_retry_seconds=retry,
        )
        config.validate()
        return config

    def backoff(self, retry: int) -> float:
        """Delay before retry number ``retry`` (0-based): interval * 2**retry, capped."""
        return float(min(self.interval_seconds * (2 ** min(retry, 16)), self.backoff_max_seconds))
