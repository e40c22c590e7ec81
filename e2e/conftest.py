"""Fixtures for the e2e suite: a real control plane (etcd + kube-apiserver +
kube-controller-manager, built by ``scripts/tools/controlplane.sh``) on loopback.

Without the binaries the e2e tests skip locally and fail under CI (env CI=true).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from controlplane.harness import (  # noqa: E402
    ControlPlane,
    bin_dir,
    missing_binaries,
    running_control_plane,
)

REPO_ROOT = Path(__file__).resolve().parent.parent

# The kind scenarios need the cluster that e2e/kind/run.sh prepares (it sets the context);
# `make test` runs them through that script, never through a bare `pytest`.
collect_ignore_glob = [] if os.environ.get("TENURE_KIND_CONTEXT") else ["kind/*"]


def _require_binaries() -> None:
    directory = bin_dir()
    missing = missing_binaries(directory, with_kcm=not os.environ.get("TENURE_E2E_NO_KCM"))
    if not missing:
        return
    reason = (f"e2e control plane not built: {', '.join(missing)} missing in {directory}; "
              f"run scripts/tools/controlplane.sh")
    if os.environ.get("CI") == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def controlplane() -> Iterator[ControlPlane]:
    """A running control plane for the whole session; torn down with no process left."""
    _require_binaries()
    yield from running_control_plane(keep_workdir=bool(os.environ.get("TENURE_E2E_KEEP")))


@pytest.fixture(scope="session")
def kube_api(controlplane: ControlPlane) -> Iterator[object]:
    """A ``kubernetes.client.ApiClient`` authenticated as the admin (system:masters)."""
    from kubernetes import config

    client = config.new_client_from_config(config_file=str(controlplane.admin_kubeconfig))
    try:
        yield client
    finally:
        client.close()


def _missing_tool(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def helm_bin() -> str:
    """Path of helm (installed by scripts/tools/helm.sh into ~/.cache/tenure-tools/bin)."""
    import shutil

    tools = Path(os.environ.get("TENURE_TOOLS_DIR", Path.home() / ".cache" / "tenure-tools"))
    for candidate in (os.environ.get("HELM"), str(tools / "bin" / "helm"), shutil.which("helm")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    _missing_tool("helm not found; run scripts/tools/helm.sh")
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """DSN (TCP on 127.0.0.1) of an embedded PostgreSQL for the session, or
    ``TENURE_TEST_DATABASE_URL`` when set."""
    import shutil
    import tempfile

    if os.environ.get("TENURE_TEST_DATABASE_URL"):
        yield os.environ["TENURE_TEST_DATABASE_URL"]
        return
    from tenure.core.embedded import ensure_server

    home = Path(tempfile.mkdtemp(prefix="tenure-e2e-pg-"))
    server = ensure_server(home / "data")
    try:
        yield server.dsn
    finally:
        server.stop("immediate")
        shutil.rmtree(home, ignore_errors=True)
