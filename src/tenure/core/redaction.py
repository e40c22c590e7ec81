"""Redaction policy for what the dead-letter queue keeps (R12): payload keys to mask and a
maximum error-text length. Applied before anything is written; the original payload is not kept."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MASK = "***"
MASK_KEYS_DEFAULT = ("password", "secret", "token", "api_key", "authorization", "card_number", "ssn")
MAX_ERROR_CHARS_DEFAULT = 2000
_SECRETISH = re.compile(r"(?i)\b(password|secret|token|api[_-]?key|authorization)\b(\s*[=:]\s*)(\S+)")


@dataclass(frozen=True)
class Redaction:
    """What the DLQ masks."""

    mask_keys: tuple[str, ...] = MASK_KEYS_DEFAULT
    """Payload keys (case-insensitive, at any depth) whose values are replaced by ``***``."""
    max_error_chars: int = MAX_ERROR_CHARS_DEFAULT
    """Error texts are truncated to this many characters."""

    def payload(self, value: Any) -> Any:
        keys = {k.lower() for k in self.mask_keys}

        def walk(v: Any) -> Any:
            if isinstance(v, dict):
                return {k: (MASK if str(k).lower() in keys else walk(x)) for k, x in v.items()}
            if isinstance(v, list):
                return [walk(x) for x in v]
            return v

        return walk(value)

    def error_text(self, text: str) -> str:
        cleaned = _SECRETISH.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text).replace("\x00", "\\0")
        if len(cleaned) > self.max_error_chars:
            cleaned = cleaned[: self.max_error_chars - 15] + "… [truncated]"
        return cleaned
