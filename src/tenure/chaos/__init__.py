"""Fault injection with invariants (`tenure chaos`).

One job per file, layered (import-linter contract "Chaos" in pyproject.toml): ``harness`` (the
local run) and ``ha`` (the Patroni run) compose ``loop`` (the shared main loop), ``faults`` (plan
and injector) or ``failover``, ``fleet`` (worker and reaper processes), ``producer``, ``patroni``,
``journal`` (the run's database connection, clock offset, fault records, progress lines) and
``config``, on top of ``store``, ``invariants`` and ``proxy``; ``tasks`` is the workers' app.
"""

QUEUE = "chaos"
"""The queue chaos jobs run on (in the run's own schema)."""
TIMED_TASK = "chaos.timed"
"""chaos.job with a per-task timeout: jobs carrying the ``overrun`` marker use it."""
TIMED_TIMEOUT = 1.5
"""Seconds chaos.timed may run: above its longest simulated work, below max_lease_total."""
WF_QUEUE = "chaos-wf"
"""The queue of the run's workflow steps, batch jobs, batch callbacks and unique jobs (issue 39),
apart from ``QUEUE`` so the checks of the numbered jobs count only those."""
STEP_TASK = "chaos.step"
"""Runs a workflow step, a batch job or a batch callback: sleeps its work time, stores a step's output."""
UNIQUE_TASK = "chaos.unique"
"""The unique jobs' task (``tenure.Unique(by=["k"])``): sleeps its work time."""
