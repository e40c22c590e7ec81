"""tenure's version: the one place it is written (pyproject reads it; workers record it in the registry)."""

__version__ = "0.1.0"
