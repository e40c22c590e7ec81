"""When the hot table's vacuum (reaper/vacuum.py) is due, and which configurations it refuses."""

from __future__ import annotations

import pytest

from tenure.core.errors import ConfigError
from tenure.reaper.vacuum import HotTableVacuum, VacuumConfig


def test_the_fraction_of_live_rows_holds_a_vacuum_back() -> None:
    keeper = HotTableVacuum(VacuumConfig(dead_rows=100, dead_fraction=0.2))
    assert not keeper.due(99, 0)  # below the absolute threshold
    assert not keeper.due(150, 1_000)  # 150 dead < 0.2 x 1,000 live
    assert keeper.due(250, 1_000)


def test_zero_dead_rows_leaves_it_to_autovacuum() -> None:
    keeper = HotTableVacuum(VacuumConfig(dead_rows=0))
    assert not keeper.config.enabled
    assert not keeper.due(10**9, 0)


@pytest.mark.parametrize("config", [VacuumConfig(check_interval=0), VacuumConfig(dead_rows=-1),
                                    VacuumConfig(dead_fraction=-0.1)])
def test_bad_configs_are_refused(config: VacuumConfig) -> None:
    with pytest.raises(ConfigError):
        config.validate()
