"""The JobQueue's conditions and Events: one writer for each.

**Conditions.** :func:`conditions_for` is the only code that writes ``status.conditions``,
from a :class:`PassReport` (what one pass found). Only full passes (the timer's: children,
Secret, figures) write them: kopf runs a JobQueue's change handlers and its timer
concurrently, and conditions are one list, so a list built by a change pass from an older
body would replace newer conditions wholesale (the e2e suite caught Ready=True with
Degraded missing). A change pass's failure is announced as a Warning Event and retried; the
next timer pass writes it into the conditions.

* ``SchemaReady``: where the migration for the current image stands;
* ``Scaling``: a scale decision, pods not ready yet, or stable;
* ``Degraded``: True with the failure's reason, else False/Healthy;
* ``Ready``: False with the failure's reason, or while the schema is not current, else True;
* ``FlowApplied`` (only while ``spec.flow`` is set, or to retire it as ``NotManaged``): True
  when the database holds the spec's flow limits, False with the reason they could not be
  applied. A pass that does not reach the database leaves it as it was.

``lastTransitionTime`` moves only when a condition's status flips.

**Events.** Each failure reason is announced once per outage: :func:`warning_for` gives a
Warning when ``Degraded`` was not already True for that reason, and :class:`Announcements`,
the one memory of what was announced, drops a Warning the process already posted (the body a
timer sees may predate its own last status patch). It forgets a JobQueue when it is deleted.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from tenure.operator.scaler import format_time

CONDITION_READY = "Ready"
CONDITION_DEGRADED = "Degraded"
CONDITION_SCALING = "Scaling"
CONDITION_SCHEMA_READY = "SchemaReady"
CONDITION_FLOW_APPLIED = "FlowApplied"
#: Deleted JobQueues whose uid is remembered, so a pass still running when its JobQueue was
#: deleted cannot bring the uid back into the memory (uids are never reused).
FORGOTTEN_MAX = 1024


@dataclasses.dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post on the JobQueue."""

    type: str  # Normal | Warning
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Failure:
    """Why a pass did not complete: a CamelCase reason, a one-line message."""

    reason: str
    message: str
    #: Only a spec change can fix it (kopf.PermanentError: no fast retries).
    permanent: bool = False


class ConditionValue(NamedTuple):
    """One condition's status, reason and message as a pass decided them."""

    status: bool
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class PassReport:
    """What one pass found, as far as conditions and the Warning Event are concerned."""

    #: A full (timer) pass: the only kind that writes conditions.
    full: bool
    failure: Failure | None = None
    #: SchemaReady, when the pass got as far as the migration step.
    schema: ConditionValue | None = None
    #: Scaling, when the pass got as far as applying the children.
    scaling: ConditionValue | None = None
    #: Ready when nothing failed (False while the schema is not current).
    ready: ConditionValue | None = None
    #: FlowApplied, when the pass applied spec.flow (or retires the condition).
    flow: ConditionValue | None = None


def upsert_condition(
    conditions: Sequence[Mapping[str, Any]],
    type_: str,
    value: ConditionValue,
    now: dt.datetime,
    generation: int | None,
) -> list[dict[str, Any]]:
    """Replace the condition of ``type_`` (others kept, order stable).

    ``lastTransitionTime`` moves only when the status flips.
    """
    text = "True" if value.status else "False"
    out: list[dict[str, Any]] = []
    found = False
    for cond in conditions:
        if cond.get("type") != type_:
            out.append(dict(cond))
            continue
        found = True
        transition = cond.get("lastTransitionTime")
        if cond.get("status") != text or not transition:
            transition = format_time(now)
        out.append(_condition(type_, text, value, str(transition), generation))
    if not found:
        out.append(_condition(type_, text, value, format_time(now), generation))
    return out


def _condition(
    type_: str, text: str, value: ConditionValue, transition: str, generation: int | None
) -> dict[str, Any]:
    cond: dict[str, Any] = {
        "type": type_,
        "status": text,
        "reason": value.reason,
        "message": value.message,
        "lastTransitionTime": transition,
    }
    if generation is not None:
        cond["observedGeneration"] = generation
    return cond


def condition_of(status: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    """The condition of ``type_`` in a JobQueue ``status``, or None."""
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == type_:
            return cond
    return None


def conditions_for(
    old_status: Mapping[str, Any], report: PassReport, now: dt.datetime, generation: int | None
) -> list[dict[str, Any]] | None:
    """The conditions to write after a pass, or None when this pass writes none (a change
    pass). The one writer of ``status.conditions``."""
    if not report.full:
        return None
    conditions: list[dict[str, Any]] = [dict(c) for c in old_status.get("conditions") or []]
    updates: list[tuple[str, ConditionValue]] = []
    if report.schema is not None:
        updates.append((CONDITION_SCHEMA_READY, report.schema))
    if report.scaling is not None:
        updates.append((CONDITION_SCALING, report.scaling))
    if report.flow is not None:
        updates.append((CONDITION_FLOW_APPLIED, report.flow))
    if report.failure is not None:
        failed = (report.failure.reason, report.failure.message)
        updates.append((CONDITION_DEGRADED, ConditionValue(True, *failed)))
        updates.append((CONDITION_READY, ConditionValue(False, *failed)))
    else:
        updates.append((CONDITION_DEGRADED, ConditionValue(False, "Healthy", "")))
        if report.ready is not None:
            updates.append((CONDITION_READY, report.ready))
    for type_, value in updates:
        conditions = upsert_condition(conditions, type_, value, now, generation)
    return conditions


def warning_for(old_status: Mapping[str, Any], failure: Failure | None) -> Event | None:
    """The Warning Event for ``failure``, unless the JobQueue is already Degraded for it."""
    if failure is None:
        return None
    previous = condition_of(old_status, CONDITION_DEGRADED)
    if previous is not None and previous.get("status") == "True" and (
            previous.get("reason") == failure.reason):
        return None
    return Event("Warning", failure.reason, failure.message)


class Announcements:
    """The failure reason last announced per JobQueue (by uid): the one memory of Events.

    Thread-safe (kopf runs sync handlers in a thread pool). :meth:`forget` is called when a
    JobQueue is deleted; a deleted uid is remembered (the last ``FORGOTTEN_MAX``) so that a
    pass that was still running cannot bring it back.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reasons: dict[str, str] = {}
        self._forgotten: collections.deque[str] = collections.deque(maxlen=FORGOTTEN_MAX)

    def to_post(self, uid: str, events: Iterable[Event], failure: Failure | None,
                full: bool) -> list[Event]:
        """The events of one pass to post, and remember its outcome: a Warning for the reason
        already announced is dropped; a failure is remembered, a full healthy pass clears it."""
        with self._lock:
            announced = self._reasons.get(uid)
            out = [e for e in events if not (e.type == "Warning" and e.reason == announced)]
            if uid in self._forgotten:
                return out
            if failure is not None:
                self._reasons[uid] = failure.reason
            elif full:
                self._reasons.pop(uid, None)
            return out

    def forget(self, uid: str) -> None:
        """The JobQueue ``uid`` was deleted."""
        with self._lock:
            self._reasons.pop(uid, None)
            if uid not in self._forgotten:
                self._forgotten.append(uid)

    def remembered(self) -> dict[str, str]:
        """A copy of the memory (uid -> reason), for tests and debugging."""
        with self._lock:
            return dict(self._reasons)
