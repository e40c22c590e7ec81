"""One-off benchmark experiments: each measured one question, and its docstring says which and
where the figures are in the docs. Each runs as ``python -m bench.experiments.NAME``; the suite
(``python -m bench``) is in bench/. Before/after comparisons take ``--before-src DIR``
(bench/server.py ``add_before_src``, ``code_env``)."""
