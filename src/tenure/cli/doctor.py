"""`tenure doctor`: the R20 playbook (dead vs hung vs slow storage, the reaper, suggested settings)
run read-only against the live database; see :mod:`tenure.observability.doctor`. Exit 0 when
healthy, 1 with warning or critical findings, 2 for bad options."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tenure.cli.common import command, duration, open_repo
from tenure.observability.doctor import (
    HUNG_MIN_SECONDS_DEFAULT,
    HUNG_RUNTIME_MULTIPLE_DEFAULT,
    LEASE_FLOOR_SECONDS_DEFAULT,
    LEASE_MARGIN_DEFAULT,
    RTT_SAMPLES_DEFAULT,
    WINDOW_SECONDS_DEFAULT,
    Doctor,
    DoctorConfig,
    DoctorStore,
    render_text,
)
from tenure.reaper.reaper import GRACE_DEFAULT, INTERVAL_DEFAULT

ORDER = 120


def register(sub: Any) -> None:
    p = command(sub, "doctor", "diagnose expired leases: dead vs hung vs slow storage, reaper, settings")
    p.add_argument("--queue", default=None, help="only this queue")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    p.add_argument("--window", type=duration, default=WINDOW_SECONDS_DEFAULT,
                   help="history for runtimes and reaps (default %(default)ss)")
    p.add_argument("--lease-margin", type=float, default=LEASE_MARGIN_DEFAULT,
                   help="suggested lease = runtime p99 x this (default %(default)s)")
    p.add_argument("--lease-floor", type=duration, default=LEASE_FLOOR_SECONDS_DEFAULT,
                   help="smallest suggested lease (default %(default)ss)")
    p.add_argument("--hung-multiple", type=float, default=HUNG_RUNTIME_MULTIPLE_DEFAULT,
                   help="a renewed job older than this x runtime p99 is hung (default %(default)s)")
    p.add_argument("--hung-min", type=duration, default=HUNG_MIN_SECONDS_DEFAULT,
                   help="...and older than this (default %(default)ss)")
    p.add_argument("--grace", type=duration, default=GRACE_DEFAULT,
                   help="the deployed reaper's grace (default %(default)ss)")
    p.add_argument("--reaper-interval", type=duration, default=INTERVAL_DEFAULT,
                   help="the deployed reaper's interval (default %(default)ss)")
    p.add_argument("--rtt-samples", type=int, default=RTT_SAMPLES_DEFAULT,
                   help="database round trips to measure (default %(default)s)")
    p.set_defaults(func=cmd_doctor)


def config_from_args(args: argparse.Namespace) -> DoctorConfig:
    return DoctorConfig(queue=args.queue, window_seconds=args.window, lease_margin=args.lease_margin,
                        lease_floor_seconds=args.lease_floor, hung_runtime_multiple=args.hung_multiple,
                        hung_min_seconds=args.hung_min, reaper_grace=args.grace,
                        reaper_interval=args.reaper_interval, rtt_samples=args.rtt_samples)


def cmd_doctor(args: argparse.Namespace) -> int:
    doctor = Doctor(config_from_args(args))
    conn, repository = open_repo(args, application_name="tenure-doctor")
    repo: DoctorStore = repository
    with conn:
        report = doctor.run_once(repo)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(render_text(report))
    return report.exit_code
