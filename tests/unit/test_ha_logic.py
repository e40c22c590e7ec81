"""Pure logic of the HA work: which errors make a service reconnect, TCP defaults of a DSN, and
the ledger comparison that counts what a failover lost."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors

from tenure.chaos.ha import HaConfig, ledger_figures
from tenure.core.db import _tcp_options, needs_reconnect, validate_dsn
from tenure.core.errors import ConfigError


@pytest.mark.parametrize("exc, expected", [
    (errors.ReadOnlySqlTransaction("cannot execute UPDATE in a read-only transaction"), True),
    (errors.AdminShutdown("terminating connection due to administrator command"), True),
    (errors.CannotConnectNow("the database system is starting up"), True),
    (errors.TooManyConnections("too many clients"), True),
    (psycopg.OperationalError("connection failed"), True),
    (psycopg.InterfaceError("the connection is closed"), True),
    (errors.UniqueViolation("duplicate key"), False),
    (errors.UndefinedTable("no such table"), False),
    (ValueError("not a database error"), False),
])
def test_needs_reconnect(exc: BaseException, expected: bool) -> None:
    assert needs_reconnect(exc) is expected


@pytest.mark.parametrize("dsn", [
    "postgresql://u:p@10.0.0.1:5432,10.0.0.2:5432,10.0.0.3:5432/db?target_session_attrs=read-write",
    "host=a,b,c port=5432,5432,5432 dbname=db target_session_attrs=read-write",
])
def test_multi_host_dsns_are_accepted(dsn: str) -> None:
    validate_dsn(dsn)
    assert _tcp_options(dsn)["tcp_user_timeout"] > 0


def test_tcp_options_keep_what_the_dsn_sets() -> None:
    options = _tcp_options("postgresql://h/db?keepalives_idle=30&tcp_user_timeout=0")
    assert "keepalives_idle" not in options and "tcp_user_timeout" not in options
    assert options["keepalives"] == 1


def test_malformed_multi_host_dsn_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        validate_dsn("host=a,b port=1,2,3,4 = bad")


def test_ha_config_rejects_unknown_failovers() -> None:
    with pytest.raises(ConfigError):
        HaConfig(faults=("reboot",)).validate()
    with pytest.raises(ConfigError):
        HaConfig(replication="semi").validate()


def _job(n: int, status: str, tokens: list[str]) -> dict[str, object]:
    return {"n": n, "status": status, "completion_tokens": tokens}


def test_ledger_figures_count_losses_and_reruns() -> None:
    t1, t2, t3 = "11111111-0000-0000-0000-000000000000", "22222222-0000-0000-0000-000000000000", \
        "33333333-0000-0000-0000-000000000000"
    ledger = [
        # job 0: completed and acknowledged; still completed by t1 on the final primary
        {"kind": "handler_start", "job_n": 0, "lock_token": t1, "at": 1.0},
        {"kind": "provider_call", "job_n": 0, "lock_token": t1, "at": 1.1},
        {"kind": "effect_acked", "job_n": 0, "lock_token": t1, "at": 1.2},
        {"kind": "completion_acked", "job_n": 0, "lock_token": t1, "at": 1.3},
        # job 1: acknowledged completion by t2 lost in the failover: ran again as t3, effect again
        {"kind": "handler_start", "job_n": 1, "lock_token": t2, "at": 2.0},
        {"kind": "provider_call", "job_n": 1, "lock_token": t2, "at": 2.1},
        {"kind": "effect_acked", "job_n": 1, "lock_token": t2, "at": 2.2},
        {"kind": "completion_acked", "job_n": 1, "lock_token": t2, "at": 2.3},
        {"kind": "handler_start", "job_n": 1, "lock_token": t3, "at": 9.0},
        {"kind": "provider_call", "job_n": 1, "lock_token": t3, "at": 9.1},
        {"kind": "completion_acked", "job_n": 1, "lock_token": t3, "at": 9.3},
    ]
    jobs = [_job(0, "completed", [t1]), _job(1, "completed", [t3])]
    figures = ledger_figures(ledger, jobs, {0, 1, 2})
    assert figures["jobs_lost"] == 1 and figures["jobs_lost_examples"] == [2]
    assert figures["acked_completions"] == 3
    assert figures["acked_completions_lost"] == 1
    assert figures["jobs_run_twice"] == 1
    assert figures["guarded_effects_rerun_after_ack"] == 1
    assert figures["guarded_provider_calls_repeated"] == 1


def test_ledger_figures_of_a_clean_run_are_zero() -> None:
    t1 = "11111111-0000-0000-0000-000000000000"
    ledger = [{"kind": "handler_start", "job_n": 0, "lock_token": t1, "at": 1.0},
              {"kind": "completion_acked", "job_n": 0, "lock_token": t1, "at": 1.3}]
    figures = ledger_figures(ledger, [_job(0, "completed", [t1])], {0})
    assert (figures["jobs_lost"], figures["acked_completions_lost"], figures["jobs_run_twice"],
            figures["guarded_effects_rerun_after_ack"]) == (0, 0, 0, 0)


def test_completion_gap_is_the_longest_gap_across_the_outage() -> None:
    from tenure.chaos.ha import completion_gap
    acks = [1.0, 1.2, 1.4, 10.0, 10.1, 30.0]
    assert completion_gap(acks, 1.5, 3.0) == pytest.approx(8.6)   # 1.4 -> 10.0 spans the outage
    assert completion_gap(acks, 12.0, 20.0) == pytest.approx(19.9)
    assert completion_gap(acks, 31.0, 40.0) is None
