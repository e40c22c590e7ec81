"""Observability: metrics, logs, and the generated Grafana dashboards and alert rules.

The generated part (``alerts``, ``dashboards``, ``generate``) produces committed files
(``dashboards/*.json``, ``dashboards/alerts.yaml`` and their copies under
``charts/tenure/files/``) through ``python -m tenure.observability.generate``; nothing of it
runs in a worker. This package ``__init__`` imports nothing so that importing the worker's
metrics module does not pull in the rule generator.
"""
