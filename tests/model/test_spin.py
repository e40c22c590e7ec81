"""SPIN model checks of the lease protocol (docs/model/lease.pml, see docs/model/README.md).

Each test generates and compiles a `pan` verifier in a temp dir and runs an exhaustive search:
the correct protocol must pass safety and liveness; each variant with a check removed must
fail for the reason it exists (that is what shows the model can catch riverqueue/river#1302).
The per-key running limit (issue 38, -DKEYLIMIT) is checked the same way: the count derived from
running rows holds the limit and a late completion frees nothing; a slot counter freed by every
completion attempt, or a claim that counts and takes without the gate, must fail.
The workflow release step (issue 39, -DWORKFLOW: parents A and B, step C waiting for both) must
release C once, only after both parents completed, never on a stale completion, and never strand
it; a judge reading a snapshot from before C's lock stalls C, a completion without the token CAS
releases C on a stale attempt, and a release check after the commit without the `waiting` guard
releases C twice.
Needs `spin` and a C compiler (scripts/tools/spin.sh): missing tools fail under CI=true and
skip otherwise. About 30-40 s in all, most of it compiling verifiers. docs/model/check.sh runs
the same set (and a --deep one) outside pytest.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "docs" / "model" / "lease.pml"
CHECK_SH = ROOT / "docs" / "model" / "check.sh"

WIDE = ("-DMAX_ATTEMPTS=3", "-DMAX_CRASH=2", "-DMAX_LOSS=3", "-DMAX_RELEASE=2")
# two jobs of one flow key under a per-key running limit of 1
FLOW = ("-DNJOBS=2", "-DKEYLIMIT=1")
# no lost messages, no releases: the only stale token is a frozen worker's whose job was reaped
REAPED_ONLY = ("-DMAX_LOSS=0", "-DMAX_RELEASE=0")
LIMIT_VIOLATED = "assertion violated (((job[0].st==1)+(job[1].st==1))<=1)"
LATE_FREE_VIOLATED = "assertion violated (slots==seen)"
# parents A (job 0) and B (job 1), step C (job 2) waiting for both; 1 reaper, no lost messages
WORKFLOW = ("-DWORKFLOW",)
# the workflow statements of the Worker (edge settle, C's lock, release, cancel, commit)
WORKFLOW_STATEMENT = re.compile(r"eout|ecommitted|stale|released|job\[2\]|wlock")


@dataclass(frozen=True)
class Tools:
    spin: str
    cc: str


@dataclass(frozen=True)
class Verdict:
    """Outcome of one pan run: its error count, states stored, full output and work dir."""

    errors: int
    states: int
    output: str
    workdir: Path


@pytest.fixture(scope="module")
def tools() -> Tools:
    spin = shutil.which("spin")
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if spin and cc:
        return Tools(spin, cc)
    message = "spin model checker or C compiler not installed (run scripts/tools/spin.sh)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def verify(tools: Tools, workdir: Path, kind: str, *defines: str) -> Verdict:
    """Build and run pan for `lease.pml` with `defines`; kind is "safety" or "liveness"."""
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.copy(MODEL, workdir / "lease.pml")
    subprocess.run([tools.spin, "-a", *defines, "lease.pml"], cwd=workdir, check=True,
                   capture_output=True, timeout=120)
    flags = ["-DSAFETY", "-DNOCLAIM"] if kind == "safety" else ["-DNFAIR=3"]
    subprocess.run([tools.cc, "-O1", "-w", *flags, "-o", "pan", "pan.c"], cwd=workdir, check=True,
                   capture_output=True, timeout=300)
    args = ["./pan", "-m100000"] + (["-a", "-f"] if kind == "liveness" else [])
    run = subprocess.run(args, cwd=workdir, capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert "max search depth too small" not in out, out
    errors = re.findall(r"errors: (\d+)", out)
    states = re.findall(r"(\d+) states, stored", out)
    assert errors and states, f"unparsable pan output:\n{out}"
    return Verdict(int(errors[-1]), int(states[-1]), out, workdir)


def unreached(output: str, proctype: str) -> str:
    """The `(N of M states)` summary of pan's unreached report for one proctype."""
    block = output.split(f"unreached in proctype {proctype}", 1)[1]
    match = re.search(r"\((\d+) of (\d+) states\)", block)
    assert match, output
    return match.group(0)


def test_correct_protocol_is_safe(tools: Tools, tmp_path: Path) -> None:
    v = verify(tools, tmp_path, "safety")
    assert v.errors == 0, v.output
    assert "assertion violated" not in v.output
    assert re.search(r"invalid end states\s+\+", v.output), v.output     # deadlocks checked...
    assert "invalid end state (" not in v.output                         # ... and none found
    assert v.states > 10_000          # a real search, not a model that stops at once
    # non-vacuity: every Worker statement (each accept and reject branch) was reached;
    # only the proctype's closing "-end-" state is unreachable
    assert unreached(v.output, "Worker").startswith("(1 of "), v.output


def test_correct_protocol_is_live_under_weak_fairness(tools: Tools, tmp_path: Path) -> None:
    v = verify(tools, tmp_path, "liveness")
    assert re.search(r"never claim\s+\+ \(live\)", v.output), v.output
    assert re.search(r"acceptance\s+cycles\s+\+ \(fairness enabled\)", v.output), v.output
    assert v.errors == 0, v.output
    assert "acceptance cycle (" not in v.output


def test_larger_fault_budgets_stay_safe(tools: Tools, tmp_path: Path) -> None:
    v = verify(tools, tmp_path, "safety", *WIDE)
    assert v.errors == 0, v.output
    assert v.states > 100_000


@pytest.mark.parametrize(("defines", "violated"), [
    # job_complete without the token check: a stale slot's completion is accepted
    (("-DNO_TOKEN_CHECK",), "assertion violated (job[j].tok==mytok)"),
    # riverqueue/river#1302: reaper writes by id after reading, undoing a completion
    (("-DREAP_NO_LOCK", "-DNO_REAPER_CAS", "-DNREAPERS=1"), "assertion violated (job[j].st==1)"),
    # reaper read and write in separate transactions: a renewed (healthy) lease is reaped
    (("-DREAP_NO_LOCK",), "assertion violated (job[j].lease<"),
], ids=["no-token-check", "river-1302", "reap-without-lock"])
def test_variant_without_a_check_fails_safety(tools: Tools, tmp_path: Path,
                                              defines: tuple[str, ...], violated: str) -> None:
    v = verify(tools, tmp_path, "safety", *defines)
    assert v.errors >= 1, v.output
    assert violated in v.output, v.output
    assert (tmp_path / "lease.pml.trail").exists()


def test_river_1302_counterexample_is_a_completion_overwritten_by_the_reaper(
        tools: Tools, tmp_path: Path) -> None:
    defines = ("-DREAP_NO_LOCK", "-DNO_REAPER_CAS", "-DNREAPERS=1")
    v = verify(tools, tmp_path, "safety", *defines)
    assert v.errors >= 1, v.output
    replay = subprocess.run([tools.spin, "-t", "-p", *defines, "lease.pml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120).stdout
    lines = replay.splitlines()
    read = next(i for i, line in enumerate(lines) if "Reaper" in line and "rtok = job[j].tok" in line)
    completed = [i for i, line in enumerate(lines)
                 if i > read and "Worker" in line and "job[j].st = 2" in line]
    assert completed, replay                       # the worker completed after the reaper's read
    assert "assertion violated" in replay, replay  # ... and the reaper's write then hit it
    assert replay.index("assertion violated") > replay.index(lines[completed[0]])


def test_unbounded_heartbeats_fail_liveness(tools: Tools, tmp_path: Path) -> None:
    v = verify(tools, tmp_path, "liveness", "-DNO_MAX_LEASE_TOTAL")
    assert v.errors >= 1, v.output
    assert "acceptance cycle" in v.output, v.output


@pytest.mark.parametrize("defines", [
    ("-DNO_REAPER_CAS",),                       # the reaper's row lock alone still protects
    ("-DREAP_NO_LOCK", "-DREAP_RECHECK"),       # no lock, but the reap CAS re-checks expiry
], ids=["row-lock-only", "recheck-without-lock"])
def test_defence_in_depth_alternatives_stay_safe(tools: Tools, tmp_path: Path,
                                                 defines: tuple[str, ...]) -> None:
    v = verify(tools, tmp_path, "safety", *defines)
    assert v.errors == 0, v.output


def test_per_key_limit_holds_with_a_count_derived_from_rows(tools: Tools, tmp_path: Path) -> None:
    v = verify(tools, tmp_path, "safety", *FLOW)
    assert v.errors == 0, v.output
    assert "assertion violated" not in v.output
    assert "invalid end state (" not in v.output
    assert v.states > 100_000
    # every Worker statement reached, the refused completion's "frees nothing" assertion included
    assert unreached(v.output, "Worker").startswith("(1 of "), v.output


def test_per_key_limit_strands_no_job(tools: Tools, tmp_path: Path) -> None:
    # a frozen holder keeps the key's slot only until the reaper takes its job
    v = verify(tools, tmp_path, "liveness", *FLOW, "-DNREAPERS=1", "-DMAX_LOSS=1")
    assert re.search(r"never claim\s+\+ \(live\)", v.output), v.output
    assert v.errors == 0, v.output


@pytest.mark.parametrize(("defines", "violated"), [
    # the key's slots as a counter that every completion attempt decrements, refused ones too
    ((*FLOW, "-DSLOT_COUNTER", *REAPED_ONLY), LATE_FREE_VIOLATED),
    # ... whose double free lets a second job of the key run
    ((*FLOW, "-DSLOT_COUNTER", *REAPED_ONLY, "-DLIMIT_ONLY"), LIMIT_VIOLATED),
    # the claim counts the key's running rows and takes a job in separate steps (no gate)
    ((*FLOW, "-DNO_GATE"), LIMIT_VIOLATED),
], ids=["slot-counter", "slot-counter-overrun", "ungated-claim"])
def test_flow_variant_fails_the_per_key_limit(tools: Tools, tmp_path: Path,
                                             defines: tuple[str, ...], violated: str) -> None:
    v = verify(tools, tmp_path, "safety", *defines)
    assert v.errors >= 1, v.output
    assert violated in v.output, v.output
    assert (tmp_path / "lease.pml.trail").exists()


def test_slot_counter_counterexample_is_a_reaped_jobs_late_completion(tools: Tools, tmp_path: Path) -> None:
    # the same bounds with the shipped derived count: nothing to find
    ok = verify(tools, tmp_path / "derived", "safety", *FLOW, *REAPED_ONLY)
    assert ok.errors == 0, ok.output
    defines = (*FLOW, "-DSLOT_COUNTER", *REAPED_ONLY)
    v = verify(tools, tmp_path / "counter", "safety", *defines)
    assert LATE_FREE_VIOLATED in v.output, v.output
    replay = subprocess.run([tools.spin, "-t", "-p", *defines, "lease.pml"], cwd=v.workdir,
                            capture_output=True, text=True, timeout=120).stdout
    lines = replay.splitlines()
    claim = next(i for i, line in enumerate(lines) if "Worker" in line and "slots = (slots+1)" in line)
    reaped = [i for i, line in enumerate(lines) if i > claim and "Reaper" in line and "slots = (slots-1)" in line]
    refused = [i for i, line in enumerate(lines) if "Worker" in line and "seen = slots" in line]
    assert reaped and refused, replay        # the reaper ended the lease and freed the slot ...
    assert refused[-1] > reaped[0], replay   # ... then the frozen holder's completion was refused
    assert "assertion violated" in replay and replay.index("assertion violated") > replay.index(lines[refused[-1]])


def test_check_script_reports_expected_passes_and_failures(tools: Tools, tmp_path: Path) -> None:
    # the tests above cover every check of the quick set; this one covers the script itself
    run = subprocess.run(["bash", str(CHECK_SH), "--keep", str(tmp_path / "work"),
                          "--only", "correct-safety,no-token-check"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"^ok\s+correct-safety\s+safety\s+expect pass got pass", run.stdout, re.M), run.stdout
    assert re.search(r"^ok\s+no-token-check\s+safety\s+expect fail got fail .*assertion violated",
                     run.stdout, re.M), run.stdout
    assert "all 2 outcomes as expected" in run.stdout
    assert (tmp_path / "work" / "no-token-check" / "lease.pml.trail").exists()


def test_check_script_fails_when_the_model_loses_its_token_check(tools: Tools, tmp_path: Path) -> None:
    broken = tmp_path / "broken.pml"
    broken.write_text("#define NO_TOKEN_CHECK\n" + MODEL.read_text())
    run = subprocess.run(["bash", str(CHECK_SH), "--only", "correct-safety"],
                         env={**os.environ, "MODEL": str(broken)},
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert re.search(r"^FAIL\s+correct-safety .*assertion violated", run.stdout, re.M), run.stdout


def unreached_lines(output: str, proctype: str) -> str:
    """The statements pan's unreached report lists for one proctype."""
    block = output.split(f"unreached in proctype {proctype}", 1)[1]
    return block.split("states)", 1)[0]


def test_workflow_release_is_safe(tools: Tools, tmp_path: Path) -> None:
    # C released at most once, never on a stale completion, claimed only after A and B completed
    v = verify(tools, tmp_path, "safety", *WORKFLOW)
    assert v.errors == 0, v.output
    assert "assertion violated" not in v.output
    assert re.search(r"invalid end states\s+\+", v.output), v.output
    assert "invalid end state (" not in v.output
    assert v.states > 100_000
    # non-vacuity: the settle, C's lock, the release, the cancel and the commit were all reached
    assert not WORKFLOW_STATEMENT.search(unreached_lines(v.output, "Worker")), v.output


def test_workflow_step_is_never_stranded(tools: Tools, tmp_path: Path) -> None:
    # every job ends: C released (then run) or cancelled by a failed parent, never left waiting
    v = verify(tools, tmp_path, "liveness", *WORKFLOW, "-DMAX_CRASH=0")
    assert re.search(r"never claim\s+\+ \(live\)", v.output), v.output
    assert v.errors == 0, v.output


@pytest.mark.parametrize(("kind", "defines", "violated"), [
    # completion without the token CAS: a frozen slot's stale completion settles B's edge, C released
    ("safety", ("-DNO_TOKEN_CHECK", "-DWF_ONLY"), "assertion violated ( !(stale[0])&& !(stale[1]))"),
    # release check in its own transaction after the commit, without `status = 'waiting'`
    ("safety", ("-DJUDGE_AFTER_COMMIT", "-DNO_WAITING_GUARD"), "assertion violated (released==1)"),
    # ... and with the guard: a crash between the commit and the check strands C
    ("liveness", ("-DJUDGE_AFTER_COMMIT",), "acceptance cycle"),
], ids=["no-token-check", "released-twice", "after-commit-stall"])
def test_workflow_variant_fails(tools: Tools, tmp_path: Path, kind: str,
                                defines: tuple[str, ...], violated: str) -> None:
    v = verify(tools, tmp_path, kind, *WORKFLOW, *defines)
    assert v.errors >= 1, v.output
    assert violated in v.output, v.output
    assert (tmp_path / "lease.pml.trail").exists()


def test_stale_snapshot_strands_the_step_after_both_parents_completed(tools: Tools, tmp_path: Path) -> None:
    # the judge reads the other parent's edge from a snapshot taken before C's lock
    defines = (*WORKFLOW, "-DMAX_CRASH=0", "-DSTALE_SNAPSHOT")
    v = verify(tools, tmp_path, "liveness", *defines)
    assert v.errors >= 1 and "acceptance cycle" in v.output, v.output
    replay = subprocess.run([tools.spin, "-t", "-p", *defines, "lease.pml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120).stdout
    before_cycle = replay.split("START OF CYCLE", 1)[0]
    assert before_cycle.count("[ecommitted[j] = 1]") == 2, replay   # A and B both committed ...
    assert "[job[2].st = 0]" not in replay, replay                   # ... and C never released
    assert "[job[2].st = 4]" not in replay, replay                   # (nor cancelled)
