"""Observability: metrics, logs, and the generated Grafana dashboards and alert rules.

The generated part produces committed files (``dashboards/*.json``, ``dashboards/alerts.yaml``
and their copies under ``charts/tenure/files/``) through
``python -m tenure.observability.generate``; nothing of it runs in a worker. ``thresholds``
declares every alert knob once; ``alerts`` assembles one ``alerts_<group>`` module per rule
group (shared rule shape and helpers in ``alert_rule``); ``dashboards`` says what each
dashboard shows, ``panels`` how a panel is built. This package ``__init__`` imports nothing so
that importing the worker's metrics module does not pull in the rule generator.
"""
