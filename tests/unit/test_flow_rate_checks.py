"""The checks of rate limits and weights (issue 38, items 3 and 5), without a database: each
refuses bad input with a ConfigError (JobSpecError on the enqueue side) of one line, and the
App's task options and JobSpec carry a rate limit reference."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tenure import App, flow
from tenure.core.errors import ConfigError, JobSpecError
from tenure.core.repository import JobSpec
from tenure.core.repository.specs import check_rate_limits_known


@pytest.mark.parametrize("name", ["a", "api", "A9", "mail.out-2_x", "9" * 100])
def test_good_rate_limit_names(name: str) -> None:
    assert flow.check_rate_limit_name(name) == name


@pytest.mark.parametrize("name", ["", "-a", ".a", "_a", "a b", "a:b", "a/b", "é", "x" * 101, " a", "a\n", None, 3])
def test_bad_rate_limit_names(name: Any) -> None:
    with pytest.raises(ConfigError, match="rate limit name") as caught:
        flow.check_rate_limit_name(name)
    assert "\n" not in str(caught.value)


def test_rates_bursts_and_weights() -> None:
    assert flow.check_per_second(2) == 2.0 and isinstance(flow.check_per_second(2), float)
    assert flow.check_per_second(0.001) == 0.001 and flow.check_per_second(1e6) == 1e6
    for bad in (0, -1, 1e6 + 1, math.nan, math.inf, True, "2", None):
        with pytest.raises(ConfigError, match="tokens per second"):
            flow.check_per_second(bad)
    assert flow.check_burst(1) == 1 and flow.check_burst(1_000_000) == 1_000_000
    for bad in (0, -1, 1.5, 2.0, 1_000_001, True, "3", None):
        with pytest.raises(ConfigError, match="burst must be a whole number"):
            flow.check_burst(bad)
    assert flow.check_weight(1) == 1.0 and flow.check_weight(0.25) == 0.25 and flow.check_weight(1000) == 1000.0
    for bad in (0, -0.5, 1000.5, math.nan, math.inf, -math.inf, False, "2", None):
        with pytest.raises(ConfigError, match="weight must be a number above 0"):
            flow.check_weight(bad)
    assert [flow.default_burst(r) for r in (0.01, 1, 2.5, 100)] == [1, 1, 3, 100]


@pytest.mark.parametrize("ref, parsed", [("api", ("api", 1)), ("api:1", ("api", 1)), ("api:25", ("api", 25)),
                                         ("a.b-c_d:1000000", ("a.b-c_d", 1_000_000))])
def test_rate_limit_references(ref: str, parsed: tuple[str, int]) -> None:
    assert flow.parse_rate_limit_ref(ref) == parsed
    assert JobSpec("t", rate_limit=ref).rate == parsed


@pytest.mark.parametrize("ref", ["", ":", "api:", ":3", "api:0", "api:-1", "api:1.5", "api:x", "api:1000001",
                                 "api:99999999", "api: 3", "api:3:4", "api:٣", "bad name", 3, ["api"]])
def test_bad_rate_limit_references(ref: Any) -> None:
    with pytest.raises(ConfigError, match="rate limit"):
        flow.parse_rate_limit_ref(ref)
    with pytest.raises(JobSpecError, match="rate limit"):
        JobSpec("t", rate_limit=ref).validate()


def test_known_limits_and_bursts() -> None:
    check_rate_limits_known([("api", 5), ("mail", 1)], {"api": 5, "mail": 1})
    with pytest.raises(JobSpecError, match="unknown rate limit 'nope'"):
        check_rate_limits_known([("api", 1), ("nope", 1)], {"api": 5})
    with pytest.raises(JobSpecError, match="a job taking 6 units of rate limit 'api' could never be claimed"):
        check_rate_limits_known([("api", 6)], {"api": 5})


def test_a_task_carries_its_rate_limit() -> None:
    app = App()

    @app.task("call", rate_limit="api", rate_units=3)
    def call(ctx: Any) -> None: ...

    @app.task("plain")
    def plain(ctx: Any) -> None: ...

    assert app.tasks["call"].rate_ref == "api:3" and app.tasks["plain"].rate_ref is None
    for options, message in (({"rate_limit": "a b"}, "rate limit name"), ({"rate_limit": 3}, "rate limit name"),
                             ({"rate_limit": "api", "rate_units": 0}, "units must be a whole number"),
                             ({"rate_limit": "api", "rate_units": 1.5}, "units must be a whole number"),
                             ({"rate_units": 2}, "rate_units needs a rate_limit")):
        with pytest.raises(ConfigError, match=message):
            app.task("other", **options)
