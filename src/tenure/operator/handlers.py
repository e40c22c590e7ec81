"""kopf registration for JobQueue: which handler runs when, and nothing else.

* ``create`` / ``update`` (of ``spec``) / ``resume``: a change pass of
  :func:`tenure.operator.engine.reconcile_jobqueue` (children in line with the spec);
* a timer every ``OperatorConfig.interval_seconds``: a full pass (figures, scaling, conditions);
* an index, ``jobqueue_exporters`` (:func:`tenure.operator.exporter.exporter_member`): the
  JobQueues that share each exporter, so a pass never lists the namespace;
* a DELETED watch event: the JobQueue is forgotten by :class:`~tenure.operator.status.Announcements`
  (the one memory the operator keeps per JobQueue, besides kopf's own);
* login, startup settings and the liveness probe.

A pass's failure becomes ``kopf.TemporaryError`` (retried after ``OperatorConfig.backoff``) or,
for a spec only its author can fix, ``kopf.PermanentError``.

Limits: kopf keeps a finalizer on every JobQueue while its timer runs, so a JobQueue deleted
while no operator runs stays until one starts (or the finalizer is removed by hand). Events are
only ours (one per scale decision, one per failure reason), not kopf's per-pass logs.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from tenure.operator import exporter as ex
from tenure.operator import spec as s
from tenure.operator.engine import Outcome, Reach, run_pass
from tenure.operator.figures import (
    FlowApplied,
    QueueFigures,
    apply_controls,
    apply_flow,
    fetch_figures,
)
from tenure.operator.kube import Kube
from tenure.operator.settings import OperatorConfig
from tenure.operator.status import Announcements


class JobQueueHandlers:
    """The bodies of the kopf handlers (registered by :func:`register`), testable without kopf's
    machinery: one pass, and the forgetting of a deleted JobQueue."""

    def __init__(self, config: OperatorConfig, kube_factory: Callable[[], Kube],
                 announcements: Announcements | None = None) -> None:
        config.validate()
        self.config = config
        self.announcements = announcements if announcements is not None else Announcements()
        self._kube_factory = kube_factory
        self._kube: Kube | None = None
        self._kube_lock = threading.Lock()

    def kube(self) -> Kube:
        """The one API client, made on first use (after kopf logged in)."""
        with self._kube_lock:
            if self._kube is None:
                self._kube = self._kube_factory()
            return self._kube

    def fetch(self, dsn: str, schema: str, queue: str) -> QueueFigures:
        return fetch_figures(dsn, schema, queue, self.config.stats_connect_timeout_seconds)

    def controls(self, dsn: str, schema: str, queue: str, paused: bool, limit: int) -> None:
        apply_controls(dsn, schema, queue, paused, limit, self.config.stats_connect_timeout_seconds)

    def flow(self, dsn: str, schema: str, queue: str, wanted: s.FlowSpec,
             requested_by: str) -> FlowApplied:
        return apply_flow(dsn, schema, queue, wanted, requested_by,
                          self.config.stats_connect_timeout_seconds)

    def run(self, body: Any, patch: Any, retry: int, *, full: bool,
            index: Mapping[tuple[str, str], Any]) -> Outcome:
        """One pass: patch the status, post the Events not yet announced, raise on failure."""
        import kopf

        # The body of a timer is a live view that kopf replaces on every event: read it once.
        snapshot = copy.deepcopy(dict(body))

        def adopt(child: dict[str, Any]) -> None:
            kopf.adopt(child, owner=body)

        reach = Reach(self.kube(), self.fetch, adopt, self.controls, ex.members_from_index(index),
                      self.config.manage_migrations, self.config.migration_retry_seconds,
                      self.flow)
        outcome = run_pass(snapshot, reach, dt.datetime.now(dt.UTC), full=full)
        for key, value in outcome.status.items():
            patch.status[key] = value
        uid = str((snapshot.get("metadata") or {}).get("uid", ""))
        for event in self.announcements.to_post(uid, outcome.events, outcome.failure, full):
            kopf.event(body, type=event.type, reason=event.reason, message=event.message)
        if outcome.failure is not None:
            message = f"{outcome.failure.reason}: {outcome.failure.message}"
            if outcome.failure.permanent:
                raise kopf.PermanentError(message)
            raise kopf.TemporaryError(message, delay=self.config.backoff(retry))
        return outcome

    def on_event(self, event: Mapping[str, Any]) -> None:
        """A raw watch event: a deleted JobQueue is forgotten."""
        if event.get("type") == "DELETED":
            uid = str(((event.get("object") or {}).get("metadata") or {}).get("uid", ""))
            self.announcements.forget(uid)


def _deleted(event: Mapping[str, Any], **_: Any) -> bool:
    return event.get("type") == "DELETED"


def register(
    registry: Any,
    config: OperatorConfig,
    kube_factory: Callable[[], Kube],
    *,
    cluster_scanning: bool = True,
    handlers: JobQueueHandlers | None = None,
) -> JobQueueHandlers:
    """Register the JobQueue handlers on a ``kopf.OperatorRegistry``; returns their bodies.

    ``cluster_scanning``: let kopf watch CRDs and namespaces appear/disappear. Only for a
    cluster-wide operator: a namespace-scoped one has no RBAC for those cluster-scoped lists,
    and kopf would log (and the API server audit) refused requests.
    """
    import kopf

    jobqueues = handlers if handlers is not None else JobQueueHandlers(config, kube_factory)
    resource = (s.GROUP, s.VERSION, s.PLURAL)

    # A private registry does not get kopf's default login handlers: log in the same two ways
    # the kubernetes client does (in-cluster ServiceAccount first, then $KUBECONFIG).
    @kopf.on.login(registry=registry)
    def _login(**kwargs: Any) -> Any:
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup(registry=registry)
    def _configure(settings: Any, **_: Any) -> None:
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=s.GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=s.GROUP, key="last-handled-configuration"
        )
        # Only our own Events (one per scale decision or failure transition): kopf would
        # otherwise turn its per-pass log lines ("Timer succeeded", each retry) into Events.
        settings.posting.level = logging.CRITICAL
        settings.watching.server_timeout = 300
        settings.execution.max_workers = 8
        settings.scanning.disabled = not cluster_scanning

    @kopf.on.probe(id="jobqueue-operator", registry=registry)
    def _probe(**_: Any) -> str:
        return "ok"

    @kopf.index(*resource, id=ex.INDEX_ID, registry=registry)
    def _exporters(body: Any, **_: Any) -> Any:
        return ex.exporter_member(body)

    # Only DELETED events reach the handler (kopf logs every handler call at INFO).
    @kopf.on.event(*resource, when=_deleted, registry=registry)
    def _forget(event: Any, **_: Any) -> None:
        jobqueues.on_event(event)

    @kopf.on.resume(*resource, registry=registry)
    @kopf.on.create(*resource, registry=registry)
    @kopf.on.update(*resource, field="spec", registry=registry)
    def _children(body: Any, patch: Any, **kwargs: Any) -> None:
        jobqueues.run(body, patch, int(kwargs.get("retry") or 0), full=False, index=kwargs[ex.INDEX_ID])

    @kopf.timer(*resource, interval=config.interval_seconds, registry=registry)
    def _scale(body: Any, patch: Any, **kwargs: Any) -> None:
        jobqueues.run(body, patch, int(kwargs.get("retry") or 0), full=True, index=kwargs[ex.INDEX_ID])

    return jobqueues
