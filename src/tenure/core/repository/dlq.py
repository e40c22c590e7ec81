"""The dead-letter queue (R12): list, controlled replay, purge. Retention of completed and cancelled
jobs (`tenure prune`) is in :mod:`tenure.core.repository.history`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tenure.core.repository.base import RepositoryBase
from tenure.core.repository.control import held_reason, past_unique_races, split_held
from tenure.core.repository.specs import Row


class DeadLetterQueries(RepositoryBase):
    """Dead letters."""

    def dlq_list(self, *, queue: str | None = None, error_code: str | None = None,
                 limit: int = 100) -> list[Row]:
        return self._rows("dlq_list", {"queue": queue, "error_code": error_code, "limit": limit})

    def dlq_replay_batch(self, *, ids: Sequence[int] | None, queue: str | None, error_code: str | None,
                         after_id: int, batch: int, validate: Callable[[Row], str | None],
                         reason: str, dry_run: bool = False) -> tuple[list[int], list[tuple[int, str]], int]:
        """Replay one batch in one transaction: ``(replayed ids, [(skipped id, why)], last id seen)``.

        ``validate`` returns None for a valid job or the reason it is invalid (it stays in the DLQ).
        A job whose unique key another live job holds stays too, skipped with why (``"unique key
        held by job 9 (pending)"``).
        ``dry_run`` selects and validates the same batch but writes nothing: the ids it returns are
        the ones a real call would replay and skip.
        """
        with self.conn.transaction():
            rows = self._rows("dlq_select_for_replay", {
                "ids": list(ids) if ids else None, "queue": queue, "error_code": error_code,
                "after_id": after_id, "batch": batch})
            good, skipped = [], []
            keys: set[str] = set()
            for row in rows:
                why = validate(row)
                if why is None:
                    if dry_run and row["held_by"] is not None:
                        skipped.append((int(row["id"]), held_reason(int(row["held_by"]), str(row["held_status"]))))
                    elif dry_run and row["unique_key"] is not None and row["unique_key"] in keys:
                        skipped.append((int(row["id"]), "unique key taken by a lower id of this replay"))
                    else:
                        good.append(int(row["id"]))
                        keys.add(row["unique_key"])
                else:
                    skipped.append((int(row["id"]), why))
                    if not dry_run:
                        self._rows("dlq_mark_invalid", {"id": row["id"], "reason": why})
            last = max((int(r["id"]) for r in rows), default=after_id)
            if dry_run:  # the rows are locked and still failed: these would move, unless a key is taken meanwhile
                return good, skipped, last
            if not good:
                return [], skipped, last
            replayed, held = split_held(past_unique_races(self.conn, lambda: self._rows(
                "dlq_replay", {"ids": good, "reason": reason, "channel": self.channel})))
            return replayed, sorted(skipped + list(held.items())), last

    def dlq_purge(self, older_than: float, queue: str | None = None) -> int:
        return len(self._rows("dlq_purge", {"older_than": float(older_than), "queue": queue}))
