"""An in-memory cluster, exporter index and JobQueue passes for the operator's unit tests."""

from __future__ import annotations

import base64
import copy
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from tenure.operator import engine as en
from tenure.operator import figures as fg
from tenure.operator.exporter import ExporterMember, exporter_member
from tenure.operator.kube import KubeError
from tenure.operator.migration import Adopter

T0 = dt.datetime(2026, 3, 1, 8, 0, 0, tzinfo=dt.UTC)
NS = "shop"


class FakeKube:
    """Objects keyed by (kind, namespace, name); apply replaces what it is given (as SSA does
    for the fields one manager owns). Deployments get a status with readyReplicas."""

    def __init__(self, store: dict[tuple[str, str, str], dict[str, Any]] | None = None) -> None:
        self.store = store if store is not None else {}
        self.monitoring = False
        self.applies = 0
        self.applied: list[tuple[str, str]] = []
        self.deleted: list[tuple[str, str]] = []
        self.listed: list[tuple[str, str]] = []
        self.fail_apply: str | None = None
        self.fail_get: str | None = None
        #: Condition a migration Job gets when applied (None: it stays running, as with no
        #: kubelet); "Complete" stands in for a pod that ran `tenure migrate` successfully.
        self.job_outcome: str | None = "Complete"
        self.pods: list[dict[str, Any]] = []
        #: The exporter index kopf would keep from its watch (see run()).
        self.exporter_index = FakeIndex()

    def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        if self.fail_apply == manifest["kind"]:
            raise KubeError(403, f"{manifest['kind']} is forbidden")
        self.applies += 1
        self.applied.append((manifest["kind"], manifest["metadata"]["name"]))
        key = (manifest["kind"], manifest["metadata"]["namespace"], manifest["metadata"]["name"])
        obj = copy.deepcopy(dict(manifest))
        if manifest["kind"] == "Deployment":
            obj["status"] = {"readyReplicas": obj["spec"]["replicas"]}
        if manifest["kind"] == "Job" and self.job_outcome is not None:
            obj["status"] = {"conditions": [{"type": self.job_outcome, "status": "True",
                                             "lastTransitionTime": "2026-03-01T08:00:00Z"}]}
        self.store[key] = obj
        return copy.deepcopy(obj)

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if self.fail_get == kind:
            raise KubeError(403, f"{kind} {name} is forbidden")
        obj = self.store.get((kind, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        self.deleted.append((kind, name))
        return self.store.pop((kind, namespace, name), None) is not None

    def list(self, api_version: str, kind: str, namespace: str,
             label_selector: str = "") -> list[dict[str, Any]]:
        self.listed.append((kind, label_selector))
        if kind == "Pod":
            return copy.deepcopy(self.pods)
        wanted = dict(term.split("=", 1) for term in label_selector.split(",") if term)
        return [copy.deepcopy(obj) for (k, ns, _), obj in sorted(self.store.items())
                if k == kind and ns == namespace
                and wanted.items() <= ((obj.get("metadata") or {}).get("labels") or {}).items()]

    def api_available(self, api_version: str, kind: str) -> bool:
        return self.monitoring and kind == "ServiceMonitor"

    def kinds(self) -> list[str]:
        return sorted(k for k, _, _ in self.store)


class FakeIndex:
    """The exporter index as kopf keeps it: each JobQueue body indexed with
    :func:`exporter_member` (re-indexing replaces its entries, like kopf's)."""

    def __init__(self) -> None:
        self.entries: dict[str, dict[tuple[str, str], ExporterMember]] = {}

    def index(self, *bodies: Mapping[str, Any]) -> FakeIndex:
        for body in bodies:
            self.entries[str(body["metadata"]["uid"])] = exporter_member(body)
        return self

    def drop(self, uid: str) -> None:
        self.entries.pop(uid, None)

    def __call__(self, namespace: str, exporter: str) -> Sequence[ExporterMember]:
        return tuple(m for entry in self.entries.values()
                     for key, m in entry.items() if key == (namespace, exporter))


def cluster_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Names resolve as in a cluster whose namespace NS has the Service the DSNs name."""
    monkeypatch.setattr(fg, "resolves", lambda name: name.endswith(f".{NS}.svc"))


def add_secret(kube: FakeKube, dsn: str = "postgresql://u:p@db/q") -> None:
    kube.store[("Secret", NS, "db")] = {
        "kind": "Secret",
        "data": {"url": base64.b64encode(dsn.encode()).decode()},
    }


def body(spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "tenure.dev/v1alpha1",
        "kind": "JobQueue",
        "metadata": {"name": "mail", "namespace": NS, "uid": "u-1", "generation": 4},
        "spec": spec
        or {
            "queue": "emails",
            "image": "tenure:1",
            "app": "shop.tasks:app",
            "database": {"secretRef": {"name": "db"}},
            "scaling": {"minReplicas": 1, "maxReplicas": 8, "scaleDownStabilizationSeconds": 60},
        },
        "status": status or {},
    }


def fetcher(figures: fg.QueueFigures | Exception) -> fg.StatsFetcher:
    def fetch(dsn: str, schema: str, queue: str) -> fg.QueueFigures:
        # The Secret's bare host "db" is read as the Service in the JobQueue's namespace.
        assert dsn == fg.dsn_in_namespace("postgresql://u:p@db/q", NS)
        assert "host=db.shop.svc" in dsn
        assert schema in ("tenure", "other") and queue == "emails"
        if isinstance(figures, Exception):
            raise figures
        return figures

    return fetch


def adopter(b: Mapping[str, Any]) -> Adopter:
    """kopf.adopt's owner reference, for the JobQueue ``b``."""
    meta = b["metadata"]

    def adopt(child: dict[str, Any]) -> None:
        child["metadata"]["ownerReferences"] = [
            {"kind": "JobQueue", "name": meta["name"], "uid": meta["uid"]}]

    return adopt


def adopt(child: dict[str, Any]) -> None:
    adopter(body())(child)


def run(
    kube: FakeKube,
    b: dict[str, Any],
    figures: fg.QueueFigures | Exception,
    now: dt.datetime = T0,
    scale: bool = True,
) -> en.Outcome:
    """One pass over ``b``, with ``b`` indexed first (kopf indexes an event before handlers)."""
    kube.exporter_index.index(b)
    return en.reconcile_jobqueue(b, kube, fetcher(figures), adopter(b), now, scale=scale,
                                 exporter_members=kube.exporter_index)


def cond(outcome: en.Outcome, type_: str) -> dict[str, Any]:
    (c,) = [c for c in outcome.status["conditions"] if c["type"] == type_]
    return c


def feed_back(b: dict[str, Any], outcome: en.Outcome) -> dict[str, Any]:
    """What the next pass sees after kopf applied the status patch."""
    nb = copy.deepcopy(b)
    nb["status"] = {**nb["status"], **copy.deepcopy(outcome.status)}
    return nb
