"""``python -m tenure``: the same as the ``tenure`` console script."""

from tenure.cli import main

raise SystemExit(main())
