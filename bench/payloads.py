"""Job payloads of the bench suite (``python -m bench --payload-bytes N``), in one place.

Every system gets, for job ``i``, the same JSON object: ``payload(i, size)`` for the systems
that take an object (tenure's ``JobSpec``, procrastinate's task arguments, both serialized with
``dumps``), ``body(i, size)`` (``dumps`` as UTF-8 bytes) for pgqueuer's ``bytea`` payload.
``dumps`` is compact JSON, ``separators=(",", ":")``, which is what tenure stores
(``tenure.core.repository.specs.encode_payload``), so all three carry the same bytes.

The object looks like an order event: ``{"i": 41, "customer_id": "cus_…", "order": "ord-…",
"amount_cents": …, "currency": "EUR", "email": "…@example.com", "note": "…"}``, distinct
values per job, deterministic (the same ``i`` and ``size`` give the same bytes in every
process). Fields are taken in that order while they fit in ``size`` bytes of serialized JSON,
then ``note`` pads the object to exactly ``size`` bytes (its text is a slice of a fixed
pseudo-random pool: distinct per job and not compressible by TOAST, unlike a run of one
character). Below about 20 bytes the object is ``{"i": …}`` alone, a little larger or smaller.

``size`` 0 is the empty case of the figures before ``--payload-bytes`` existed: ``{}`` (or the
``extra`` fields alone), and ``body`` gives ``None`` (an empty pgqueuer payload).

``extra`` fields (e.g. ``{"t": <producer's wall clock>}`` of the latency producers) come first
and are kept; the padding counts them, so the whole object is still about ``size`` bytes.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Mapping
from typing import Any

DEFAULT_BYTES = 100
"""The default of ``--payload-bytes``: a small, realistic JSON object."""
MAX_BYTES = 256 * 1024
"""The largest ``--payload-bytes``: tenure's default payload limit (``TENURE_MAX_PAYLOAD_BYTES``)."""
PAD_KEY = "note"
_MIX = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_CURRENCIES = ("EUR", "USD", "GBP", "CHF")
_POOL_LEN = 1 << 16
_POOL = "".join(random.Random(40).choices(_ALPHABET + " ", k=_POOL_LEN))
_POOL2 = _POOL + _POOL
_PAD_OVERHEAD = len(json.dumps(PAD_KEY)) + 4
"""``,"note":""``: what an empty pad entry adds to an object that has other entries."""


def dumps(obj: Any) -> str:
    """Compact JSON, as tenure stores payloads (and as procrastinate and pgqueuer get them here)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _base62(h: int, width: int) -> str:
    out = []
    for _ in range(width):
        h, r = divmod(h, 62)
        out.append(_ALPHABET[r])
    return "".join(out)


def _fields(i: int) -> list[tuple[str, Any]]:
    """The optional fields of job ``i``, in the order they are taken (ASCII strings that JSON
    does not escape, and ints: ``payload`` counts their serialized length without ``dumps``)."""
    h = ((i + 1) * _MIX) & _MASK
    return [("customer_id", "cus_" + _base62(h, 10)),
            ("order", f"ord-{i:08d}"),
            ("amount_cents", 100 + h % 99_900),
            ("currency", _CURRENCIES[h >> 62]),
            ("email", _base62(h >> 13, 8).lower() + "@example.com")]


def _pad(i: int, k: int) -> str:
    if k <= _POOL_LEN:
        off = (i * 7919) % _POOL_LEN
        return _POOL2[off:off + k]
    return (_POOL * (k // _POOL_LEN + 1))[:k]


def payload(i: int, size: int = DEFAULT_BYTES, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Job ``i``'s payload, about ``size`` bytes of ``dumps`` (exactly, unless ``size`` is below
    the ``extra`` fields plus ``{"i": …}`` and the pad's own key); ``{}`` (``extra``) for 0."""
    out: dict[str, Any] = dict(extra or {})
    if size <= 0:
        return out
    out["i"] = i
    length = len(dumps(out))
    taken: list[tuple[str, int]] = []
    for key, value in _fields(i):
        entry = len(key) + 4 + (len(value) + 2 if isinstance(value, str) else len(str(value)))  # ,"key":value
        if length + entry > size:
            break
        out[key] = value
        length += entry
        taken.append((key, entry))
    room = size - length - _PAD_OVERHEAD
    if room < 0 and taken and size - length > 0:
        key, entry = taken.pop()  # too little room left for the pad: drop a field, pad instead
        del out[key]
        length -= entry
        room = size - length - _PAD_OVERHEAD
    if room >= 0:
        out[PAD_KEY] = _pad(i, room)
    return out


def body(i: int, size: int = DEFAULT_BYTES, extra: Mapping[str, Any] | None = None) -> bytes | None:
    """pgqueuer's payload for job ``i``: ``dumps(payload(i, size, extra))`` as UTF-8; ``None``
    when that is the empty object (``size`` 0 without ``extra``), as the figures before had."""
    p = payload(i, size, extra)
    return dumps(p).encode() if p else None


def batch(system: str, first: int, k: int, size: int = DEFAULT_BYTES,
          extra: Mapping[str, Any] | None = None) -> list[Any]:
    """What the bench hands ``system`` for jobs ``first`` … ``first + k - 1``: payload objects for
    ``tenure`` (``JobSpec``) and ``procrastinate`` (task arguments), ``body`` bytes (or ``None``)
    for ``pgqueuer``, JSON texts for ``sql`` (the bulk fixtures of bench/queries.sql and the floor).
    Every fill and producer of the suite goes through here."""
    if system in ("tenure", "procrastinate"):
        return [payload(i, size, extra) for i in range(first, first + k)]
    if system == "pgqueuer":
        return [body(i, size, extra) for i in range(first, first + k)]
    if system == "sql":
        return [dumps(payload(i, size, extra)) for i in range(first, first + k)]
    raise ValueError(f"unknown system {system!r}")


def describe(size: int) -> str:
    """The payload as a table header says it: ``payload 100 B`` or ``empty payload ({})``."""
    return f"payload {size:,} B" if size > 0 else "empty payload ({})"


def size_arg(text: str) -> int:
    """argparse type of ``--payload-bytes``: a whole number in [0, MAX_BYTES]."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of bytes, got {text!r}") from None
    if not 0 <= n <= MAX_BYTES:
        raise argparse.ArgumentTypeError(f"must be within [0, {MAX_BYTES}] (0: empty payloads), got {n}")
    return n


def add_argument(parser: argparse.ArgumentParser) -> None:
    """``--payload-bytes N`` for the bench's command lines (``python -m bench``, its workers)."""
    parser.add_argument("--payload-bytes", type=size_arg, default=DEFAULT_BYTES, metavar="N",
                        help=f"serialized JSON size of every job's payload (default {DEFAULT_BYTES}: a realistic "
                             "object with distinct values per job; 0: empty payloads, as figures before "
                             "this option)")
