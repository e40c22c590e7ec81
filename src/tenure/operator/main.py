"""Entry point of ``tenure operator``: load credentials, register handlers, run kopf.

Runs standalone (no kopf peering objects: the chart deploys exactly one replica with the
Recreate strategy, so there is never a second operator to coordinate with).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from tenure.core.errors import ConfigError
from tenure.operator.handlers import register
from tenure.operator.kube import Kube, KubeClient
from tenure.operator.settings import OperatorConfig

log = logging.getLogger(__name__)


def load_kube_config() -> None:
    """In-cluster credentials when running in a pod, else $KUBECONFIG / ~/.kube/config."""
    import kubernetes

    try:
        kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]


def run(
    namespaces: Sequence[str] | None = None,
    all_namespaces: bool = False,
    liveness_endpoint: str | None = None,
    config: OperatorConfig | None = None,
) -> None:
    """Run the operator until SIGINT/SIGTERM (blocking).

    ``namespaces``: watch only these; ``all_namespaces``: watch the whole cluster (exactly one
    of the two must be given). ``liveness_endpoint``: e.g. ``http://0.0.0.0:8080/healthz``
    (kopf's health endpoint, probed by the chart's livenessProbe and ``helm test``).
    ``config``: operator settings, from the environment when None
    (``TENURE_OPERATOR_INTERVAL_SECONDS``, ``TENURE_OPERATOR_BACKOFF_MAX_SECONDS``).
    Raises ConfigError on bad arguments before touching the cluster.
    """
    import kopf

    selected = [n for n in (namespaces or []) if n]
    if all_namespaces and selected:
        raise ConfigError("give either --all-namespaces or --namespace, not both")
    if not all_namespaces and not selected:
        raise ConfigError("give --all-namespaces or at least one --namespace")
    config = config if config is not None else OperatorConfig.from_env()
    config.validate()

    load_kube_config()

    def kube_factory() -> Kube:
        return KubeClient(field_manager=config.field_manager)

    # The kubelet probes /healthz every few seconds: one access-log line and one "probe
    # succeeded" line per probe would bury the reconcile log. Failures still log.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("kopf.activities.probe").setLevel(logging.WARNING)

    registry = kopf.OperatorRegistry()
    register(registry, config, kube_factory, cluster_scanning=all_namespaces)
    log.info(
        "tenure operator starting: %s, interval %ss",
        "all namespaces" if all_namespaces else f"namespaces {selected}",
        config.interval_seconds,
    )
    kopf.run(
        registry=registry,
        standalone=True,
        clusterwide=all_namespaces,
        namespaces=selected,
        liveness_endpoint=liveness_endpoint,
    )
