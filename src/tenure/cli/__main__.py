"""``python -m tenure.cli``: the same as the ``tenure`` console script."""

from tenure.cli import main

raise SystemExit(main())
