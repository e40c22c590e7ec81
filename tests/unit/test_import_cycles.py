"""No import circle in `tenure` or `bench` (house style 10).

Uses grimp (import-linter's graph library), which also sees imports made inside
functions, so a circle hidden behind a lazy import fails here too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[2]


def import_cycles(package: str) -> list[tuple[str, str]]:
    """Pairs (module, imported) where `imported` leads back to `module`."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))  # bench/ is a top-level package of the checkout
    graph = grimp.build_graph(package)
    cycles = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if graph.find_shortest_chain(importer=imported, imported=module):
                cycles.append((module, imported))
    return cycles


@pytest.mark.parametrize("package", ["tenure", "bench"])
def test_no_import_cycle(package: str) -> None:
    assert import_cycles(package) == []
