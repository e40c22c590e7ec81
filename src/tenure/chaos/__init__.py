"""Fault injection with invariants (`tenure chaos`): harness, TCP proxy, chaos tasks, checks."""

QUEUE = "chaos"
"""The queue chaos jobs run on (in the run's own schema)."""
TIMED_TASK = "chaos.timed"
"""chaos.job with a per-task timeout: jobs carrying the ``overrun`` marker use it."""
TIMED_TIMEOUT = 1.5
"""Seconds chaos.timed may run: above its longest simulated work, below max_lease_total."""
