"""Kubernetes side of tenure: the JobQueue CRD, pure reconcile/scaling logic and kopf handlers.

Only :mod:`tenure.operator.handlers` and :mod:`tenure.operator.main` talk to an API server;
everything else is pure and unit-tested without a cluster.
"""
