"""Minimal Kubernetes access for the operator: server-side apply, get, delete, secrets, discovery.

A thin layer over the official ``kubernetes`` client's ApiClient (raw paths, JSON dicts), so the
same five calls serve Deployments, CronJobs, Jobs, Services, PDBs and ServiceMonitors without
typed models. Only what the RBAC in charts/tenure/templates/rbac.yaml grants is used:
create/patch on the children, get/list/delete where the reconciler reads or retires them,
list on the migration Jobs' pods, get on Secrets. API discovery (``/apis/GROUP/VERSION``)
needs no RBAC rule (system:discovery).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any, Protocol

FIELD_MANAGER_DEFAULT = "tenure-operator"
REQUEST_TIMEOUT_SECONDS = 30

#: kind -> (plural, namespaced) for every kind the operator writes or reads.
PLURALS: dict[str, str] = {
    "Deployment": "deployments",
    "CronJob": "cronjobs",
    "Service": "services",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "ServiceMonitor": "servicemonitors",
    "Secret": "secrets",
    "Job": "jobs",
    "Pod": "pods",
    "JobQueue": "jobqueues",
}


class KubeError(Exception):
    """A non-2xx answer from the API server (status code and server message kept)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class Kube(Protocol):
    """What the reconciler needs from a cluster (a fake implements it in unit tests)."""

    def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply ``manifest`` (creates or updates); returns the live object."""

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The live object, or None when it does not exist."""

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete; False when it did not exist."""

    def list(
        self, api_version: str, kind: str, namespace: str, label_selector: str = ""
    ) -> list[dict[str, Any]]:
        """Objects of ``kind`` in ``namespace`` (optionally filtered by a label selector)."""

    def api_available(self, api_version: str, kind: str) -> bool:
        """Whether the API server serves ``kind`` under ``api_version`` (discovery)."""


def object_path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    """REST path of a namespaced object (or its collection when ``name`` is None)."""
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = f"{base}/namespaces/{namespace}/{PLURALS[kind]}"
    return f"{path}/{name}" if name else path


def secret_value(secret: Mapping[str, Any], key: str) -> str | None:
    """Decoded ``data[key]`` (or ``stringData``) of a Secret object; None when absent."""
    data = secret.get("data") or {}
    if key in data and data[key] is not None:
        return base64.b64decode(str(data[key])).decode("utf-8").strip()
    string_data = secret.get("stringData") or {}
    if key in string_data:
        return str(string_data[key]).strip()
    return None


class KubeClient:
    """:class:`Kube` over ``kubernetes.client.ApiClient`` (credentials loaded by the caller)."""

    def __init__(
        self, api_client: Any = None, field_manager: str = FIELD_MANAGER_DEFAULT
    ) -> None:
        import kubernetes

        self._api = api_client if api_client is not None else kubernetes.client.ApiClient()
        self._field_manager = field_manager
        self._discovery: dict[str, set[str]] = {}

    def _request(
        self,
        method: str,
        path: str,
        *,
        body: str | dict[str, Any] | None = None,
        content_type: str | None = None,
        query: list[tuple[str, str]] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        serialized = self._api.param_serialize(
            method,
            path,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        m, url, hdrs, b, post = serialized
        response = self._api.call_api(m, url, hdrs, b, post, _request_timeout=REQUEST_TIMEOUT_SECONDS)
        response.read()
        raw = response.data or b"{}"
        try:
            payload = json.loads(raw)
        except ValueError:
            payload = {"message": raw.decode("utf-8", "replace")[:500]}
        status = int(response.status)
        if status >= 400 and status != 404:
            raise KubeError(status, str(payload.get("message", payload)))
        return status, payload if isinstance(payload, dict) else {}

    def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        meta = manifest["metadata"]
        path = object_path(manifest["apiVersion"], manifest["kind"], meta["namespace"], meta["name"])
        status, payload = self._request(
            "PATCH",
            path,
            # A str: sent as is under the apply-patch content type (JSON is valid YAML).
            body=json.dumps(manifest),
            content_type="application/apply-patch+yaml",
            query=[("fieldManager", self._field_manager), ("force", "true")],
        )
        if status == 404:
            raise KubeError(404, f"{manifest['kind']} API not found at {path}")
        return payload

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        status, payload = self._request("GET", object_path(api_version, kind, namespace, name))
        return None if status == 404 else payload

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        status, _ = self._request(
            "DELETE",
            object_path(api_version, kind, namespace, name),
            # A dict: the client JSON-encodes it (a str would be encoded twice for JSON).
            body={"propagationPolicy": "Background"},
            content_type="application/json",
        )
        return status != 404

    def list(
        self, api_version: str, kind: str, namespace: str, label_selector: str = ""
    ) -> list[dict[str, Any]]:
        query = [("labelSelector", label_selector)] if label_selector else []
        status, payload = self._request(
            "GET", object_path(api_version, kind, namespace), query=query
        )
        if status == 404:
            return []
        return [i for i in payload.get("items") or [] if isinstance(i, dict)]

    def api_available(self, api_version: str, kind: str) -> bool:
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        status, payload = self._request("GET", base)
        if status == 404:
            return False
        kinds = {str(r.get("kind")) for r in payload.get("resources", []) if isinstance(r, dict)}
        return kind in kinds
