"""Kubernetes side of tenure: the JobQueue CRD, the reconcile engine, scaling and kopf handlers.

One job per module: ``settings`` (the operator's config and environment), ``spec`` (the typed
JobQueue spec), ``manifests`` (pure child builders), ``scaler`` (the replica decision),
``figures`` (the one edge to the database), ``status`` (conditions and Events, one writer),
``migration`` (the migration Job), ``exporter`` (the shared exporter, from a kopf index),
``engine`` (one pass, as named steps), ``handlers`` (kopf registration), ``kube`` (API access),
``crd`` (the generated CRD) and ``main`` (``tenure operator``). Only ``kube``, ``handlers`` and
``main`` talk to an API server; everything else is unit-tested without a cluster.
"""
