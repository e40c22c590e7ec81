"""The files of secrets that `tenure sqs --credentials` and `tenure ui --users` read (a
Kubernetes Secret, mounted): one entry per line, fields separated by ``:``, blank lines and
lines starting with ``#`` skipped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tenure.core.errors import ConfigError


def colon_lines(path: str, option: str, shape: str) -> Iterator[tuple[int, list[str]]]:
    """``(line number, fields)`` of each entry of ``path``; ConfigError (naming ``option``, the
    file and the line) when it cannot be read or a line has not the fields of ``shape``
    (``USER:BCRYPT_HASH:ROLE``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {option} {path}: {exc}") from None
    wanted = shape.count(":") + 1
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(":")
        if len(parts) != wanted or not all(parts):
            raise ConfigError(f"{path}:{lineno}: expected {shape}")
        yield lineno, parts
