"""Smoke tests of the e2e control plane itself: the API server answers, enforces CRD CEL
validation and RBAC, and the harness leaves no process behind."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from controlplane.harness import ControlPlane, bin_dir, process_alive

pytestmark = pytest.mark.e2e

GROUP = "smoke.e2e.tenure.dev"
CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [{
            "name": "v1",
            "served": True,
            "storage": True,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {
                    "type": "object",
                    "required": ["min", "max"],
                    "properties": {
                        "min": {"type": "integer", "minimum": 0},
                        "max": {"type": "integer", "default": 10},
                    },
                    "x-kubernetes-validations": [{
                        "rule": "self.min <= self.max",
                        "message": "spec.min must not exceed spec.max",
                    }],
                }},
            }},
        }],
    },
}


def _widget(name: str, spec: dict[str, int]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": "Widget",
            "metadata": {"name": name}, "spec": spec}


@pytest.fixture(scope="module")
def widget_crd(controlplane: ControlPlane) -> str:
    status, body = controlplane.request(
        "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)
    assert status in (201, 409), body
    path = f"/apis/{GROUP}/v1/namespaces/default/widgets"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if controlplane.request("GET", path)[0] == 200:
            return path
        time.sleep(0.5)
    pytest.fail("CRD never became served")


def test_api_server_reports_version_and_readiness(controlplane: ControlPlane) -> None:
    status, version = controlplane.request("GET", "/version")
    assert status == 200
    assert version["major"] == "1" and version["gitVersion"].startswith("v1.")
    assert controlplane.request("GET", "/readyz")[0] == 200


def test_python_client_lists_namespaces(kube_api: Any) -> None:
    from kubernetes import client

    names = {ns.metadata.name for ns in client.CoreV1Api(kube_api).list_namespace().items}
    assert {"default", "kube-system"} <= names


def test_cel_rule_rejects_bad_object_with_readable_message(
        controlplane: ControlPlane, widget_crd: str) -> None:
    status, body = controlplane.request("POST", widget_crd, _widget("bad", {"min": 5, "max": 2}))
    assert status == 422, body
    assert "spec.min must not exceed spec.max" in body["message"]
    assert controlplane.request("GET", f"{widget_crd}/bad")[0] == 404


def test_schema_accepts_good_object_and_applies_default(
        controlplane: ControlPlane, widget_crd: str) -> None:
    status, body = controlplane.request("POST", widget_crd, _widget("good", {"min": 3}))
    assert status == 201, body
    assert body["spec"] == {"min": 3, "max": 10}


def test_rbac_is_enforced_for_service_accounts(controlplane: ControlPlane) -> None:
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = controlplane.service_account_kubeconfig(
            "rbac-smoke", "nobody", Path(tmp) / "sa.kubeconfig")
        api = config.new_client_from_config(config_file=str(kubeconfig))
        try:
            with pytest.raises(ApiException) as denied:
                client.CoreV1Api(api).list_namespaced_pod("rbac-smoke")
        finally:
            api.close()
    assert denied.value.status == 403
    assert "system:serviceaccount:rbac-smoke:nobody" in str(denied.value.body)


def test_stop_leaves_no_process_behind(controlplane: ControlPlane) -> None:
    # controlplane ensures the binaries exist; this starts a second, short-lived one.
    with tempfile.TemporaryDirectory() as tmp:
        plane = ControlPlane(binaries=bin_dir(), workdir=Path(tmp),
                             with_controller_manager=False)
        with plane:
            pids = plane.pids()
            assert len(pids) == 2 and all(process_alive(p) for p in pids)
        assert not any(process_alive(p) for p in pids)


def test_audit_log_records_denied_requests(controlplane: ControlPlane) -> None:
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = controlplane.service_account_kubeconfig(
            "rbac-smoke", "auditee", Path(tmp) / "sa.kubeconfig")
        api = config.new_client_from_config(config_file=str(kubeconfig))
        try:
            with pytest.raises(ApiException):
                client.CoreV1Api(api).read_namespaced_secret("nothing", "rbac-smoke")
        finally:
            api.close()
    user = "system:serviceaccount:rbac-smoke:auditee"
    denied: list[str] = []
    deadline = time.monotonic() + 10
    while not denied and time.monotonic() < deadline:
        denied = controlplane.denied_requests(user)
        time.sleep(0.2)
    assert denied == ["get /api/v1/namespaces/rbac-smoke/secrets/nothing -> 403"]
