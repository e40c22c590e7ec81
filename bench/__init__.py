"""Benchmarks of tenure against pgqueuer and procrastinate (``python -m bench``); see docs/performance.md."""
