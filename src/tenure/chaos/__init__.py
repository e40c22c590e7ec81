"""Fault injection with invariants (`tenure chaos`): harness, TCP proxy, chaos tasks, checks."""

QUEUE = "chaos"
"""The queue chaos jobs run on (in the run's own schema)."""
