#!/usr/bin/env bash
# Model-check the tenure lease protocol (docs/model/lease.pml) with SPIN.
#
# Runs the correct model (safety: assertions + invalid end states; liveness: `<> terminal`
# under weak fairness) and every bug variant, which must FAIL. Exits non-zero on any
# unexpected outcome (a correct model that fails, a bug variant that passes, an incomplete
# search). Needs `spin` (scripts/tools/spin.sh installs it) and a C compiler.
#
#   docs/model/check.sh            quick set, 30-50 s, ~0.3 GiB (what CI runs)
#   docs/model/check.sh --deep     adds two jobs and larger fault budgets (~9 min, ~1.5 GiB)
#   docs/model/check.sh --keep DIR keep the work directory (pan sources, counterexample trails)
#   docs/model/check.sh --only A,B run only the named checks (names as printed)
# Environment: MODEL (default docs/model/lease.pml), CC (default cc),
#              PAN_CFLAGS (default -O1, -O2 with --deep).
#
# Replay a counterexample: cd DIR/<name> && spin -t -p <defines> lease.pml
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
model="${MODEL:-$here/lease.pml}"
deep=0
keep=""
only=""
while [ $# -gt 0 ]; do
    case "$1" in
        --deep) deep=1 ;;
        --keep) keep="${2:?--keep needs a directory}"; shift ;;
        --only) only=",${2:?--only needs check names},"; shift ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "check.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done

for tool in spin "${CC:-cc}"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "check.sh: '$tool' not found (install spin with scripts/tools/spin.sh)" >&2
        exit 2
    fi
done

if [ -n "$keep" ]; then
    mkdir -p "$keep"; work="$(cd "$keep" && pwd)"
else
    work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
fi

unexpected=0
ran=0

# run NAME KIND EXPECT [DEFINES...]
#   KIND: safety | liveness     EXPECT: pass | fail
run() {
    local name="$1" kind="$2" expect="$3"; shift 3
    local dir="$work/$name" out flags panflags t0 t1 errors states outcome verdict detail
    if [ -n "$only" ] && [[ "$only" != *",$name,"* ]]; then return; fi
    ran=$((ran + 1))
    mkdir -p "$dir"; cp "$model" "$dir/lease.pml"
    (cd "$dir" && spin -a "$@" lease.pml >spin.log 2>&1) || {
        echo "FAIL  $name: spin -a failed"; cat "$dir/spin.log"; unexpected=$((unexpected + 1)); return; }
    if [ "$kind" = safety ]; then
        flags="-DSAFETY -DNOCLAIM"; panflags="-m100000"
    else
        flags="-DNFAIR=3"; panflags="-a -f -m100000"
    fi
    [ "$deep" = 1 ] && panflags="$panflags -w26"
    flags="$flags ${PAN_CFLAGS:-$([ "$deep" = 1 ] && echo -O2 || echo -O1)}"
    # shellcheck disable=SC2086
    (cd "$dir" && "${CC:-cc}" -w $flags -o pan pan.c) || {
        echo "FAIL  $name: cc failed"; unexpected=$((unexpected + 1)); return; }
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    (cd "$dir" && ./pan $panflags >pan.out 2>&1) || true
    t1=$(date +%s.%N)
    out="$dir/pan.out"
    errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | tail -n1)
    states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "$out" | tail -n1)
    if [ -z "$errors" ] || grep -q "max search depth too small\|out of memory" "$out"; then
        outcome="incomplete"
    elif [ "$errors" = 0 ]; then
        outcome="pass"
    else
        outcome="fail"
    fi
    detail=""
    if [ "$outcome" = fail ]; then
        detail="$(grep -m1 -o 'assertion violated.*\|acceptance cycle.*\|invalid end state.*' "$out" || true)"
        # a failing variant must fail for the reason it exists
        if [ "$kind" = safety ] && ! grep -q "assertion violated" "$out"; then outcome="fail(other)"; fi
        if [ "$kind" = liveness ] && ! grep -q "acceptance cycle" "$out"; then outcome="fail(other)"; fi
    fi
    # non-vacuity: on a passing run every statement of the Worker must be reachable; in the
    # workflow model (wf-*, fault budgets cut) every workflow statement of the Worker: the
    # edge settle, C's lock, release and cancel, the commit
    if [ "$outcome" = pass ] && [ "$kind" = safety ] && [ "$expect" = pass ] && [[ "$name" == wf-* ]]; then
        if awk '/unreached in proctype Worker/{w=1; next} w && /of [0-9]+ states/{exit} w' "$out" \
                | grep -q 'eout\|ecommitted\|stale\|released\|job\[2\]\|wlock'; then
            outcome="vacuous"; detail="unreached workflow statements in Worker (see $dir/pan.out)"
        fi
    elif [ "$outcome" = pass ] && [ "$kind" = safety ] && [ "$expect" = pass ]; then
        if ! awk '/unreached in proctype Worker/{w=1; next} w && /of [0-9]+ states/{print; exit}' "$out" \
                | grep -q '^[[:space:]]*(1 of '; then
            outcome="vacuous"; detail="unreached Worker statements (see $dir/pan.out)"
        fi
    fi
    if [ "$outcome" = "$expect" ]; then verdict="ok  "; else verdict="FAIL"; unexpected=$((unexpected + 1)); fi
    printf '%s  %-26s %-8s expect %-4s got %-10s states %-10s %6.2fs  %s %s\n' \
        "$verdict" "$name" "$kind" "$expect" "$outcome" "${states:-?}" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')" "$*" "${detail:+- $detail}"
}

echo "spin: $(spin -V | head -n1); model: $model"
# the correct protocol (1 job, 3 worker slots, 2 reapers)
run correct-safety           safety   pass
run correct-liveness         liveness pass
run wide-safety              safety   pass -DMAX_ATTEMPTS=3 -DMAX_CRASH=2 -DMAX_LOSS=3 -DMAX_RELEASE=2
# bugs the model must catch
run no-token-check           safety   fail -DNO_TOKEN_CHECK
run river-1302               safety   fail -DREAP_NO_LOCK -DNO_REAPER_CAS -DNREAPERS=1
run reap-without-lock        safety   fail -DREAP_NO_LOCK
run no-max-lease-total       liveness fail -DNO_MAX_LEASE_TOTAL
# defence in depth / design alternatives that must still hold
run row-lock-only            safety   pass -DNO_REAPER_CAS
run recheck-without-lock     safety   pass -DREAP_NO_LOCK -DREAP_RECHECK
# per-key running limit (issue 38): 2 jobs of one flow key, limit 1, count derived from rows
flow=(-DNJOBS=2 -DKEYLIMIT=1)
run flow-safety              safety   pass "${flow[@]}"
run flow-liveness            liveness pass "${flow[@]}" -DNREAPERS=1 -DMAX_LOSS=1
# ... and the bugs it must catch. No lost messages or releases: the only stale token left is
# a frozen worker's after the reaper took its job, so the trail is a reaped job's late completion.
run slot-counter             safety   fail "${flow[@]}" -DSLOT_COUNTER -DMAX_LOSS=0 -DMAX_RELEASE=0
run slot-counter-overrun     safety   fail "${flow[@]}" -DSLOT_COUNTER -DMAX_LOSS=0 -DMAX_RELEASE=0 -DLIMIT_ONLY
run ungated-claim            safety   fail "${flow[@]}" -DNO_GATE
# workflow release step (issue 39): parents A and B, step C waiting for both (1 reaper, no
# lost messages or releases: the stale tokens are a crashed or frozen slot's whose job was reaped)
wf=(-DWORKFLOW)
run wf-safety                safety   pass "${wf[@]}"
run wf-liveness              liveness pass "${wf[@]}" -DMAX_CRASH=0
run wf-no-waiting-guard      safety   pass "${wf[@]}" -DNO_WAITING_GUARD
run wf-after-commit          safety   pass "${wf[@]}" -DJUDGE_AFTER_COMMIT
# ... and the bugs it must catch
run wf-stale-snapshot        liveness fail "${wf[@]}" -DMAX_CRASH=0 -DSTALE_SNAPSHOT
run wf-no-token-check        safety   fail "${wf[@]}" -DNO_TOKEN_CHECK -DWF_ONLY
run wf-released-twice        safety   fail "${wf[@]}" -DJUDGE_AFTER_COMMIT -DNO_WAITING_GUARD
run wf-after-commit-stall    liveness fail "${wf[@]}" -DJUDGE_AFTER_COMMIT
if [ "$deep" = 1 ]; then
    run wf-liveness-crash    liveness pass "${wf[@]}"
    run wf-safety-loss       safety   pass "${wf[@]}" -DMAX_LOSS=1
    run wf-safety-release    safety   pass "${wf[@]}" -DMAX_RELEASE=1
    run wf-safety-two-reapers safety  pass "${wf[@]}" -DNREAPERS=2
    run flow-liveness-wide   liveness pass "${flow[@]}"
    run wide-liveness        liveness pass -DMAX_ATTEMPTS=3 -DMAX_CRASH=2 -DMAX_LOSS=3 -DMAX_RELEASE=2
    run two-jobs-safety      safety   pass -DNJOBS=2
    run two-jobs-liveness    liveness pass -DNJOBS=2
fi

if [ "$ran" -eq 0 ]; then
    echo "check.sh: no check matched --only ${only//,/ }" >&2
    exit 2
fi
if [ "$unexpected" -ne 0 ]; then
    echo "check.sh: $unexpected unexpected outcome(s)" >&2
    exit 1
fi
echo "check.sh: all $ran outcomes as expected"
