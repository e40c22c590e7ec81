"""A real Kubernetes control plane on loopback for the e2e suite: etcd + kube-apiserver
(+ kube-controller-manager for garbage collection), the same shape as controller-runtime's
envtest.

Purpose: prove the operator against a real API server (CRD schema and CEL validation, status
subresources, owner references, defaults, watches, RBAC) without Docker.

Limits: there is no scheduler and no kubelet, so Pods are never scheduled and Deployments never
report ready replicas. kube-controller-manager runs only the controllers listed in
``KCM_CONTROLLERS_DEFAULT`` (garbage collection, namespaces, Deployments/ReplicaSets). The
binaries come from ``e2e/controlplane/build.sh``; this module never builds anything.
Certificates are made with the ``openssl`` CLI and live only in the temporary work directory.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"

READY_TIMEOUT_DEFAULT = 120.0
"""Seconds to wait for etcd health and the API server's /readyz."""
STOP_TIMEOUT_DEFAULT = 15.0
"""Seconds a component gets after SIGTERM before it is killed."""
ISSUER_DEFAULT = "https://kubernetes.default.svc.cluster.local"
"""ServiceAccount token issuer (and API audience) of the test API server."""
ADMIN_USER_DEFAULT = "tenure-e2e-admin"
"""Common name of the admin client certificate (in group system:masters)."""
KCM_CONTROLLERS_DEFAULT = "garbagecollector,namespace,serviceaccount,deployment,replicaset"
"""kube-controller-manager controllers to run: owner-reference GC, namespace deletion, default
ServiceAccounts, and Deployment -> ReplicaSet so that Deployment status is written."""
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
"""
"""Every request is audited (metadata only), so tests can look for denied calls."""


class ControlPlaneError(RuntimeError):
    """A component failed to start; the message carries the tail of its log."""


def bin_dir() -> Path:
    """Directory where build.sh puts (or has put) the binaries for the pinned version."""
    override = os.environ.get("TENURE_E2E_BIN")
    if override:
        return Path(override)
    out = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-bin-dir"],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def missing_binaries(directory: Path, with_kcm: bool = True) -> list[str]:
    """Names of required binaries absent from ``directory``."""
    names = ["etcd", "kube-apiserver"] + (["kube-controller-manager"] if with_kcm else [])
    return [n for n in names if not os.access(directory / n, os.X_OK)]


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 (racy by nature; callers retry on bind errors)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def die_with_parent() -> None:
    """``preexec_fn``: have the kernel SIGKILL the child if the spawning thread dies, so a
    killed pytest cannot leave an API server behind (Linux only; a no-op elsewhere)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _make_certs(pki: Path) -> None:
    """CA, API serving cert (127.0.0.1/localhost), admin client cert, SA signing key."""
    pki.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=tenure-e2e-ca", cwd=pki)

    def leaf(name: str, subj: str, ext: str) -> None:
        _openssl("req", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", subj, cwd=pki)
        (pki / f"{name}.ext").write_text(ext)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.crt", "-days", "2",
                 "-extfile", f"{name}.ext", cwd=pki)

    leaf("apiserver", "/CN=kube-apiserver",
         "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
         "extendedKeyUsage=serverAuth\n"
         "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n")
    leaf("admin", f"/O=system:masters/CN={ADMIN_USER_DEFAULT}",
         "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
         "extendedKeyUsage=clientAuth\n")
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, server: str, ca: Path, user: dict[str, str],
                     namespace: str = "default") -> Path:
    """Write a single-context kubeconfig (JSON is valid YAML) and return its path."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {
            "server": server, "certificate-authority-data": _b64(ca)}}],
        "users": [{"name": "e2e-user", "user": user}],
        "contexts": [{"name": "e2e", "context": {
            "cluster": "e2e", "user": "e2e-user", "namespace": namespace}}],
        "current-context": "e2e",
    }
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)
    return path


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    log_file: IO[bytes]

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


@dataclass
class ControlPlane:
    """etcd + kube-apiserver (+ kube-controller-manager) in ``workdir``; use as a context manager.

    After ``start()``: ``server`` is the https URL, ``admin_kubeconfig`` a kubeconfig for a
    system:masters user, ``ca_file`` the cluster CA.
    """

    binaries: Path
    workdir: Path
    with_controller_manager: bool = True
    ready_timeout: float = READY_TIMEOUT_DEFAULT
    server: str = ""
    etcd_url: str = ""
    procs: list[_Proc] = field(default_factory=list)

    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    @property
    def ca_file(self) -> Path:
        return self.pki / "ca.crt"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    def audit_events(self, username: str | None = None) -> list[dict[str, Any]]:
        """Audit events (ResponseComplete/Panic stage) so far, optionally of one user."""
        events: list[dict[str, Any]] = []
        try:
            lines = self.audit_log.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return events
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line being written right now
            if event.get("stage") == "RequestReceived":
                continue
            if username is not None and event.get("user", {}).get("username") != username:
                continue
            events.append(event)
        return events

    def denied_requests(self, username: str) -> list[str]:
        """``VERB URI -> CODE`` of every request by ``username`` that RBAC refused (403)."""
        return [f"{e.get('verb')} {e.get('requestURI')} -> 403"
                for e in self.audit_events(username)
                if (e.get("responseStatus") or {}).get("code") == 403]

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        missing = missing_binaries(self.binaries, self.with_controller_manager)
        if missing:
            raise ControlPlaneError(f"missing binaries in {self.binaries}: {missing}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            _make_certs(self.pki)
            self._with_port_retry(self._start_etcd)
            self._with_port_retry(self._start_apiserver)
            write_kubeconfig(self.admin_kubeconfig, self.server, self.ca_file, {
                "client-certificate-data": _b64(self.pki / "admin.crt"),
                "client-key-data": _b64(self.pki / "admin.key"),
            })
            if self.with_controller_manager:
                self._start_controller_manager()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every component (reverse start order); SIGKILL the process group if needed."""
        for proc in reversed(self.procs):
            _terminate(proc.popen, STOP_TIMEOUT_DEFAULT)
            proc.log_file.close()
        self.procs.clear()

    def pids(self) -> list[int]:
        return [p.popen.pid for p in self.procs]

    def logs(self) -> dict[str, str]:
        """Tail of each component's log, for failure messages."""
        return {p.name: p.tail() for p in self.procs}

    # -- components ------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> _Proc:
        log = self.workdir / f"{name}.log"
        log_file = log.open("ab")
        popen = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True,
                                 cwd=self.workdir, preexec_fn=die_with_parent)
        proc = _Proc(name, popen, log, log_file)
        self.procs.append(proc)
        return proc

    def _wait(self, proc: _Proc, probe: Any, what: str) -> None:
        deadline = time.monotonic() + self.ready_timeout
        last = ""
        while time.monotonic() < deadline:
            if proc.popen.poll() is not None:
                raise ControlPlaneError(
                    f"{proc.name} exited with {proc.popen.returncode} before {what}:\n"
                    f"{proc.tail()}")
            try:
                if probe():
                    return
            except (OSError, urllib.error.URLError, ssl.SSLError) as exc:
                last = str(exc)
            time.sleep(0.5)
        raise ControlPlaneError(f"{proc.name} not {what} after {self.ready_timeout}s "
                                f"(last error: {last}):\n{proc.tail()}")

    def _with_port_retry(self, start: Any, attempts: int = 3) -> None:
        """Run ``start``; if the component lost a free-port race, retry on new ports."""
        for attempt in range(attempts):
            try:
                start()
                return
            except ControlPlaneError as exc:
                if "address already in use" not in str(exc) or attempt == attempts - 1:
                    raise
                failed = self.procs.pop()
                _terminate(failed.popen, STOP_TIMEOUT_DEFAULT)
                failed.log_file.close()

    def _start_etcd(self) -> None:
        shutil.rmtree(self.workdir / "etcd", ignore_errors=True)  # fresh on each attempt
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        proc = self._spawn("etcd", [
            str(self.binaries / "etcd"),
            "--name=e2e",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=e2e=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ])

        def healthy() -> bool:
            with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as resp:
                return bool(json.load(resp).get("health") == "true")

        self._wait(proc, healthy, "healthy")

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def _start_apiserver(self) -> None:
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        pki = self.pki
        (self.workdir / "audit-policy.yaml").write_text(AUDIT_POLICY)
        proc = self._spawn("kube-apiserver", [
            str(self.binaries / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=RBAC",
            "--anonymous-auth=false",
            f"--service-account-issuer={ISSUER_DEFAULT}",
            f"--api-audiences={ISSUER_DEFAULT}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            f"--audit-policy-file={self.workdir / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}",
            "--v=1",
        ])
        ctx = self._ssl_context()

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"{self.server}/readyz", timeout=5,
                                            context=ctx) as resp:
                    return bool(resp.status == 200)
            except urllib.error.HTTPError:
                return False

        self._wait(proc, ready, "ready (/readyz)")

    def _start_controller_manager(self) -> None:
        proc = self._spawn("kube-controller-manager", [
            str(self.binaries / "kube-controller-manager"),
            f"--kubeconfig={self.admin_kubeconfig}",
            f"--controllers={KCM_CONTROLLERS_DEFAULT}",
            "--leader-elect=false",
            "--use-service-account-credentials=false",
            "--secure-port=0",
            "--concurrent-gc-syncs=5",
            "--v=1",
        ])
        # No health endpoint with --secure-port=0: it is up once it stays up for a moment.
        time.sleep(2)
        if proc.popen.poll() is not None:
            raise ControlPlaneError(f"kube-controller-manager exited with "
                                    f"{proc.popen.returncode}:\n{proc.tail()}")

    # -- clients ---------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """Raw admin request to the API server; returns (status, decoded JSON or text)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.server}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30, context=self._ssl_context()) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path,
                                   expiration_seconds: int = 3600) -> Path:
        """Kubeconfig authenticating as ServiceAccount ``namespace/name`` (created if absent)
        with a token from the TokenRequest API, so RBAC for that identity is enforced."""
        status, body = self.request("GET", f"/api/v1/namespaces/{namespace}")
        if status == 404:
            status, body = self.request("POST", "/api/v1/namespaces", {
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
            if status not in (201, 409):
                raise ControlPlaneError(f"creating namespace {namespace}: {status} {body}")
        status, body = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", {
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})
        if status not in (201, 409):
            raise ControlPlaneError(f"creating serviceaccount {namespace}/{name}: {status} {body}")
        status, body = self.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"audiences": [ISSUER_DEFAULT], "expirationSeconds": expiration_seconds}})
        if status != 201:
            raise ControlPlaneError(f"TokenRequest for {namespace}/{name}: {status} {body}")
        token = body["status"]["token"]
        return write_kubeconfig(path, self.server, self.ca_file, {"token": token},
                                namespace=namespace)


def _terminate(popen: subprocess.Popen[bytes], timeout: float) -> None:
    if popen.poll() is None:
        try:
            os.killpg(popen.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    # Kill anything left in the group (the leader may be gone while children live on).
    try:
        os.killpg(popen.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        popen.wait(timeout)
    except subprocess.TimeoutExpired:
        pass


def process_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def running_control_plane(keep_workdir: bool = False) -> Iterator[ControlPlane]:
    """Generator for a pytest fixture: start a control plane in a temp dir, yield, stop."""
    workdir = Path(tempfile.mkdtemp(prefix="tenure-e2e-"))
    plane = ControlPlane(binaries=bin_dir(), workdir=workdir,
                         with_controller_manager=not os.environ.get("TENURE_E2E_NO_KCM"))
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()
        if not keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
