/*
 * tenure lease protocol: a SPIN (Promela) model of one or two jobs, three worker slots and
 * one or two reapers. docs/model/README.md maps every step to the named query in
 * src/tenure/core/sql/queries/lease.sql and reaping.sql, says how to run the checks, and lists
 * the model's limits.
 *
 * One `atomic` block = one SQL statement (one UPDATE ... WHERE ... that PostgreSQL applies to
 * the row atomically). Anything a worker or reaper does between two statements is a separate
 * step, so every other process may run in between.
 *
 * Faults: lost requests and lost responses (the DB committed, the worker never learns it),
 * worker crashes (the slot forgets its token), freezes of any length (a process takes no step
 * while the clock ticks), a handler whose heartbeat thread renews forever (bounded by
 * MAX_TOTAL, R4), graceful releases, a reaper whose transaction aborts. Time is the DB clock
 * only (R6): workers have no clock, so worker clock skew cannot exist in the model.
 *
 * Per-key running limit (issue 38): -DKEYLIMIT=N gives every job the same flow key with a
 * per-key running limit of N (use with -DNJOBS=2 or 3). The gated claim (queue_claim_gate, then
 * job_claim in the same transaction) counts the key's live `status='running'` rows and takes a
 * job only while that count is below N, in one step. There is no counter: the count is derived
 * from the rows (KEY_RUNNING), so whatever ends a lease frees the slot, and a refused late write
 * frees nothing.
 *
 * Variants (docs/model/check.sh runs them all):
 *   must FAIL safety:
 *   -DNO_TOKEN_CHECK                 job_complete_many without `lock_token = token`
 *   -DREAP_NO_LOCK -DNO_REAPER_CAS   reaper reads, then writes by id only (riverqueue/river#1302)
 *   -DREAP_NO_LOCK                   reaper read and CAS in separate transactions (no row lock
 *                                    in between): a lease renewed in the gap is reaped anyway
 *   -DKEYLIMIT=1 -DSLOT_COUNTER      the key's slots are a separate counter, freed by every
 *                                    completion attempt, refused stale ones too ("freed twice")
 *   ... -DSLOT_COUNTER -DLIMIT_ONLY  the same, checking only the limit: the double free lets a
 *                                    second job of the key run
 *   -DKEYLIMIT=1 -DNO_GATE           the claim counts the key's running rows and takes the job
 *                                    in separate steps (no per-queue gate serialising claims)
 *   must FAIL liveness:
 *   -DNO_MAX_LEASE_TOTAL             heartbeats renew forever (no R4 bound)
 *   must PASS (alternatives / defence in depth):
 *   -DNO_REAPER_CAS                  the row lock alone still protects the completion
 *   -DREAP_NO_LOCK -DREAP_RECHECK    no row lock, but the reap CAS re-checks the expiry
 *
 * Workflow release step (issue 39): -DWORKFLOW gives three jobs: parents A (job 0) and B (job 1)
 * and a step C (job 2), enqueued `waiting`, that depends on both. The write that ends a parent
 * (a worker's completion or dead letter, the reaper's dead letter) runs workflow_settle in its
 * transaction: (1) in the same statement, settle the parent's edge (only while unsettled) and
 * keep the parent's row locked; (2) lock C's row if C is still waiting (FOR UPDATE, held until
 * COMMIT); (3) a later statement, with a fresh snapshot, reads both edges (the other parent's
 * settle only once its transaction committed) and releases C (waiting -> pending) when both
 * completed, or cancels it when one failed; COMMIT. See the WORKFLOW section below.
 *   -DWORKFLOW -DSTALE_SNAPSHOT      must FAIL liveness: step (3) reads the other edge as of a
 *                                    snapshot taken before the lock: C can stall forever
 *   -DWORKFLOW -DNO_TOKEN_CHECK -DWF_ONLY   must FAIL safety: a stale completion settles its
 *                                    edge and releases C (WF_ONLY: only the workflow checks)
 *   -DWORKFLOW -DNO_WAITING_GUARD    must PASS: (2)+(3) without `status = 'waiting'`, the
 *                                    in-transaction judge still releases C once ...
 *   ... -DJUDGE_AFTER_COMMIT         ... but FAILS safety (released twice) once the release
 *                                    check runs in its own transaction after the commit
 *   -DWORKFLOW -DJUDGE_AFTER_COMMIT  must PASS safety, FAIL liveness (a crash between the
 *                                    commit and the check strands C)
 */

/* ---- parameters (override with spin -DNAME=value) ---------------------------------- */
#ifdef WORKFLOW
#ifdef KEYLIMIT
#error "WORKFLOW and KEYLIMIT are separate models"
#endif
#define NJOBS 3            /* A, B and the step C that waits for both */
#ifndef NREAPERS
#define NREAPERS 1
#endif
#ifndef MAX_LOSS
#define MAX_LOSS 0
#endif
#ifndef MAX_RELEASE
#define MAX_RELEASE 0
#endif
#endif
#ifndef NJOBS
#define NJOBS 1            /* jobs in the queue: 1, 2 or 3 */
#endif
/* KEYLIMIT: per-key running limit, all jobs share one flow key; undefined = no limit */
#ifndef NREAPERS
#define NREAPERS 2         /* concurrent reapers: 1 or 2 */
#endif
#ifndef MAX_ATTEMPTS
#define MAX_ATTEMPTS 2     /* jobs.max_attempts */
#endif
#ifndef LEASE
#define LEASE 2            /* --lease, in clock ticks */
#endif
#ifndef GRACE
#define GRACE 1            /* reaper --grace, in clock ticks */
#endif
#ifndef MAX_TOTAL
#define MAX_TOTAL 5        /* --max-lease-total in ticks; > LEASE + GRACE + 1 so a late heartbeat can meet a reaper */
#endif
#ifndef MAX_CRASH
#define MAX_CRASH 1        /* worker crashes per run (bounded so liveness is provable) */
#endif
#ifndef MAX_LOSS
#define MAX_LOSS 2         /* lost requests/responses + aborted reaper transactions per run */
#endif
#ifndef MAX_RELEASE
#define MAX_RELEASE 1      /* graceful releases (SIGTERM drains) per run */
#endif

/* lease_expires_at - now(), in ticks, saturates at FLOOR ("expired for longer than grace") */
#define FLOOR (-(GRACE + 1))

/* jobs.status */
#define PENDING   0
#define RUNNING   1
#define COMPLETED 2
#define FAILED    3
#define CANCELLED 4        /* WORKFLOW: C cancelled by a failed dep (dependency_failed) */
#define WAITING   5        /* WORKFLOW: C waits for its deps (not claimable, not terminal) */

/* outcome of a write as the worker sees it */
#define REJECTED 0
#define ACCEPTED 1
#define LOST     2

typedef Job {
    byte  st;      /* status */
    byte  by;      /* locked_by: worker id, 0 = NULL */
    byte  tok;     /* lock_token: fresh per claim, 0 = NULL (not running) */
    byte  fence;   /* claims so far; the next token is ++fence (monotonic, never reused) */
    byte  att;     /* attempt_count */
    byte  age;     /* now() - started_at, in ticks, saturates at MAX_TOTAL */
    short lease;   /* lease_expires_at - now(), in ticks; < -GRACE means reapable */
    bool  lock     /* row lock held by a reaper transaction (FOR UPDATE, until COMMIT) */
};
Job job[NJOBS];

/* ---- fault budgets and ghost variables (not in the DB) ------------------------------ */
byte crashes;              /* worker crashes used */
byte losses;               /* lost messages / aborted reaper transactions used */
byte releases;             /* releases used */
byte completions[NJOBS];   /* accepted completions per job */

/* ---- the flow key's running limit (issue 38) ----------------------------------------
 * KEY_RUNNING: the key's live running rows, derived from the jobs as job_claim counts them.
 * SLOTS: the count the claim consults. The shipped design has no counter (SLOTS is
 * KEY_RUNNING); the SLOT_COUNTER mutant keeps a separate counter, incremented by the claim and
 * decremented by whatever ends a lease (CLEAR) and, the bug, by a refused completion too. */
#if NJOBS == 1
#define KEY_RUNNING   (job[0].st == RUNNING)
#elif NJOBS == 2
#define KEY_RUNNING   ((job[0].st == RUNNING) + (job[1].st == RUNNING))
#else
#define KEY_RUNNING   ((job[0].st == RUNNING) + (job[1].st == RUNNING) + (job[2].st == RUNNING))
#endif

#ifdef SLOT_COUNTER
short slots;               /* BUG: the key's running count kept as a counter */
#define SLOTS           slots
#define SLOT_TAKE       slots++
#define SLOT_FREE       slots--
#define LATE_FREE       slots--   /* BUG: the completion path frees the slot whatever its CAS did */
#else
#define SLOTS           KEY_RUNNING
#define SLOT_TAKE       skip
#define SLOT_FREE       skip
#define LATE_FREE       skip      /* a refused UPDATE writes no row, so frees no slot */
#endif

#ifdef KEYLIMIT
#define ROOM            (SLOTS < KEYLIMIT)
#else
#define ROOM            true
#endif

/* ghost: the slot count just before a refused completion (always reset to 0) */
short seen;

/* Property: a refused (late, stale-token) completion leaves the key's slot count unchanged. */
#ifdef LIMIT_ONLY
#define CHECK_LATE_FREE  seen = 0
#else
#define CHECK_LATE_FREE  assert(SLOTS == seen); seen = 0
#endif

/* Property: the key never has more than KEYLIMIT running jobs. KEY_RUNNING grows only in
 * job_claim (the only write that sets status = running), so checking it after every claim
 * checks it in every reachable state. */
#ifdef KEYLIMIT
#define CHECK_LIMIT      assert(KEY_RUNNING <= KEYLIMIT)
#else
#define CHECK_LIMIT      skip
#endif

/* A job the claim may take: pending, and (gated claim) the key below its limit. */
#define CLAIMABLE(k)        (job[k].st == PENDING && ROOM)
#define REAPABLE(k)         (job[k].st == RUNNING && job[k].lease < -GRACE && !job[k].lock)
#define TICKS(k)            (job[k].st == RUNNING && (job[k].lease > FLOOR || job[k].age < MAX_TOTAL))

#if NJOBS == 1
#define CHOOSE_PENDING(x)   CLAIMABLE(0) -> x = 0
#define CHOOSE_REAPABLE(x)  REAPABLE(0) -> x = 0
#define ALL_TERMINAL        (job[0].st >= COMPLETED)
#define CAN_TICK            TICKS(0)
#elif NJOBS == 2
#define CHOOSE_PENDING(x) \
    if \
    :: CLAIMABLE(0) -> x = 0 \
    :: CLAIMABLE(1) -> x = 1 \
    fi
#define CHOOSE_REAPABLE(x) \
    if \
    :: REAPABLE(0) -> x = 0 \
    :: REAPABLE(1) -> x = 1 \
    fi
#define ALL_TERMINAL        (job[0].st >= COMPLETED && job[1].st >= COMPLETED)
#define CAN_TICK            (TICKS(0) || TICKS(1))
#else
#define CHOOSE_PENDING(x) \
    if \
    :: CLAIMABLE(0) -> x = 0 \
    :: CLAIMABLE(1) -> x = 1 \
    :: CLAIMABLE(2) -> x = 2 \
    fi
#define CHOOSE_REAPABLE(x) \
    if \
    :: REAPABLE(0) -> x = 0 \
    :: REAPABLE(1) -> x = 1 \
    :: REAPABLE(2) -> x = 2 \
    fi
#define ALL_TERMINAL        (job[0].st >= COMPLETED && job[1].st >= COMPLETED && job[2].st >= COMPLETED && \
                             job[2].st != WAITING)
#define CAN_TICK            (TICKS(0) || TICKS(1) || TICKS(2))
#endif

/* The CAS of every worker write:
 *   WHERE id = $id AND status = 'running' AND locked_by = $worker AND lock_token = $token */
#define HOLDS(j, w, t)  (job[j].st == RUNNING && job[j].by == w && job[j].tok == t)

#ifdef NO_TOKEN_CHECK
#define COMPLETE_CAS(j, w, t)  (job[j].st == RUNNING && job[j].by == w)        /* BUG */
#else
#define COMPLETE_CAS(j, w, t)  HOLDS(j, w, t)
#endif

/* job_heartbeat: ... AND started_at + max_lease_total > now();
 * lease_expires_at = least(now() + lease, started_at + max_lease_total)   (R4) */
#ifdef NO_MAX_LEASE_TOTAL
#define HEARTBEAT_CAS(j, w, t)  HOLDS(j, w, t)                                  /* BUG: R4 */
#define RENEWED(j)              LEASE
#else
#define HEARTBEAT_CAS(j, w, t)  (HOLDS(j, w, t) && job[j].age < MAX_TOTAL)
#define RENEWED(j)              (LEASE < MAX_TOTAL - job[j].age -> LEASE : MAX_TOTAL - job[j].age)
#endif

/* job_reap_expired: WHERE id = $id AND status = 'running' AND lock_token = $token_read */
#if defined(NO_REAPER_CAS)
#define REAP_CAS(j, t)  (true)                                                 /* BUG: #1302 */
#elif defined(REAP_RECHECK)
#define REAP_CAS(j, t)  (job[j].st == RUNNING && job[j].tok == t && job[j].lease < -GRACE)
#else
#define REAP_CAS(j, t)  (job[j].st == RUNNING && job[j].tok == t)
#endif

/* job_reap_candidates ... FOR UPDATE SKIP LOCKED, in the same transaction as job_reap_expired:
 * the row stays locked until COMMIT, so worker UPDATEs on it wait and other reapers skip it. */
#ifdef REAP_NO_LOCK
#define TAKE_LOCK(j)    skip
#else
#define TAKE_LOCK(j)    job[j].lock = true
#endif
#define ROW_FREE(j)     (!job[j].lock)

/* Leaving 'running' clears lease_expires_at, locked_by and lock_token (NULL); with a derived
 * count that alone frees the key's slot (SLOT_FREE is the SLOT_COUNTER mutant's decrement). */
#define CLEAR(j)  job[j].by = 0; job[j].tok = 0; job[j].lease = 0; job[j].age = 0; SLOT_FREE

/* Safety, checked on every accepted write (ghost: compares with the writer's own token and
 * the job's status, independent of the WHERE clause the variant uses):
 *   - a terminal job never changes again (a completion is never undone, #1302);
 *   - only the current token's holder changes a job (no stale holder). */
#define WORKER_WRITE_OK(j, t) \
    assert(job[j].st == RUNNING); \
    assert(job[j].tok == t)

/* a message may be lost (bounded budget) */
#define MAY_LOSE(r) \
    if \
    :: true \
    :: losses < MAX_LOSS -> losses++; r = LOST \
    fi

#define GOTO_IDLE  j = 0; mytok = 0; res = 0; goto end_idle

/* after the outcome: lease lost -> stop; unknown -> still holding, may retry or do anything */
#define DISPATCH(r, on_accept) \
    if \
    :: r == ACCEPTED -> on_accept \
    :: r == REJECTED -> GOTO_IDLE \
    :: r == LOST     -> r = 0; goto holding \
    fi

/* One worker write: the UPDATE waits for a reaper's row lock, its request may be lost
 * (no change), else it applies atomically and its response may be lost. `on_refuse` runs when
 * the CAS refuses the write (for the completion: the late-completion property). */
#define WRITE_OR(guard, body, on_accept, on_refuse) \
    atomic { \
        ROW_FREE(j) -> \
        if \
        :: losses < MAX_LOSS -> losses++; res = LOST \
        :: (guard) -> WORKER_WRITE_OK(j, mytok); body; res = ACCEPTED; MAY_LOSE(res) \
        :: !(guard) -> on_refuse; res = REJECTED; MAY_LOSE(res) \
        fi; \
        DISPATCH(res, on_accept) \
    }
#define WRITE(guard, body, on_accept)  WRITE_OR(guard, body, on_accept, skip)

/* ---- workflow release step (issue 39, -DWORKFLOW) ------------------------------------
 * Jobs 0 (A) and 1 (B) are parents, job 2 (C) is a step enqueued `waiting` with an edge from
 * each (workflow_deps rows C <- A, C <- B). The write that ends a parent runs workflow_settle
 * (src/tenure/core/sql/migrations/0018_workflows_batches.sql) in its own transaction:
 *   (1) WF_SETTLE, in the ending statement itself (after its CAS): the parent's edge gets
 *       `settled` if still NULL; the parent's row stays locked until COMMIT;
 *   (2) lock C's row if it is still waiting and its other edge is still open as this
 *       transaction sees it (FOR UPDATE, held until COMMIT; waits for another transaction's
 *       lock, then re-checks the status, as READ COMMITTED does); with the other edge settled
 *       and committed nobody else can settle an edge of C, and the judge's UPDATE locks it;
 *   (3) a later statement (fresh snapshot) reads both edges, its own settle and the other
 *       parent's only if committed, and moves C if still waiting: to `pending` (released) when
 *       both completed, to `cancelled` when one failed; then COMMIT.
 * A refused (stale) completion changes no row, so no trigger fires: it settles nothing.
 */
#ifdef WORKFLOW
#define CJOB 2
byte eout[2];          /* workflow_deps.settled of edge p: 0 = NULL, COMPLETED or FAILED ... */
bool ecommitted[2];    /* ... and whether that write committed (visible to other statements) */
bool stale[2];         /* ghost: edge p settled by a completion that did not hold the current token */
byte released;         /* ghost: C's releases (waiting -> pending) */

/* edge q as a statement of another transaction sees it */
#define COMMITTED_EDGE(q)  (ecommitted[q] -> eout[q] : 0)

#ifdef NO_WAITING_GUARD
#define C_JUDGED  true                       /* BUG: lock and UPDATE without status = 'waiting' */
#else
#define C_JUDGED  (job[CJOB].st == WAITING)
#endif

#ifdef WF_ONLY
#define WF_WRITE_OK(j, t)     skip           /* only the workflow properties are checked */
#define WF_ONE_COMPLETION(j)  skip
#else
#define WF_WRITE_OK(j, t)     WORKER_WRITE_OK(j, t)
#define WF_ONE_COMPLETION(j)  assert(completions[j] == 1)
#endif

/* Properties of the release, checked where C is released: at most once, and never on an edge
 * that a stale completion settled. (That C starts only after both parents completed and
 * committed is checked at C's claim.) */
#define CHECK_RELEASE \
    released++; \
    assert(released == 1); \
    assert(!stale[0] && !stale[1])

/* (1): in the statement that ends parent p; wset = an edge was settled (else the function
 * returns at once). STALE_SNAPSHOT: the judge will read the other edge as this statement saw it. */
#ifdef STALE_SNAPSHOT
#define SNAPSHOT(p)  wsnap = COMMITTED_EDGE(1 - p)
#else
#define SNAPSHOT(p)  skip
#endif
#ifdef JUDGE_AFTER_COMMIT
#define HOLD_ROW(p)  ecommitted[p] = true    /* the ending statement commits at once */
#else
#define HOLD_ROW(p)  job[p].lock = true
#endif
#define WF_SETTLE(p, outcome, isstale) \
    HOLD_ROW(p); \
    if \
    :: eout[p] == 0 -> eout[p] = outcome; stale[p] = isstale; wset = true; SNAPSHOT(p) \
    :: else -> skip \
    fi

/* the judge's UPDATE of C, C locked (wlock) */
#define WF_JUDGE(p, other) \
    if \
    :: wlock && (eout[p] == FAILED || other == FAILED) -> job[CJOB].st = CANCELLED \
    :: wlock && eout[p] == COMPLETED && other == COMPLETED -> CHECK_RELEASE; job[CJOB].st = PENDING \
    :: else -> skip \
    fi

#ifdef STALE_SNAPSHOT
#define OTHER_EDGE(p)  wsnap                 /* BUG: the snapshot taken before the lock */
#else
#define OTHER_EDGE(p)  COMMITTED_EDGE(1 - p) /* a fresh snapshot, after the lock */
#endif

/* (2) and (3) and COMMIT, after the statement that ended parent p was applied */
inline wf_release(p) {
#ifndef JUDGE_AFTER_COMMIT
    if
    :: wset ->
       /* (2) only when the other edge is still open as this transaction sees it: with it
        * settled and committed, no other transaction can settle an edge of C any more */
       atomic {
           if
           :: COMMITTED_EDGE(1 - p) != 0 -> skip
           :: else -> !job[CJOB].lock -> if :: C_JUDGED -> job[CJOB].lock = true; wlock = true :: else -> skip fi
           fi
       };
       atomic {
           (wlock || !job[CJOB].lock) ->             /* the judge's UPDATE waits for C's row lock */
           if :: !wlock -> wlock = C_JUDGED :: else -> skip fi;
           WF_JUDGE(p, OTHER_EDGE(p));
           if :: wlock -> job[CJOB].lock = false :: else -> skip fi;
           ecommitted[p] = true; job[p].lock = false;             /* COMMIT */
           wset = false; wlock = false; wsnap = 0
       }
    :: else -> atomic { job[p].lock = false }                     /* COMMIT */
    fi
#else
    /* JUDGE_AFTER_COMMIT: the ending statement committed; the release check is a transaction
     * of its own, which a crash of its process may never run */
    if
    :: wset ->
       if
       :: atomic { crashes < MAX_CRASH -> crashes++; wset = false }
       :: atomic { !job[CJOB].lock -> wlock = C_JUDGED; WF_JUDGE(p, COMMITTED_EDGE(1 - p));
                   wset = false; wlock = false }
       fi
    :: else -> skip
    fi
#endif
}

/* A worker write that ends parent j (completion or dead letter): WRITE_OR's CAS, then
 * workflow_settle in the same transaction (Worker's wf_tail), then the response (which may be
 * lost). */
#define WF_WRITE(guard, body, outcome) \
    atomic { \
        ROW_FREE(j) -> \
        if \
        :: losses < MAX_LOSS -> losses++; res = LOST \
        :: (guard) -> WF_WRITE_OK(j, mytok); WF_SETTLE(j, outcome, job[j].tok != mytok); body; res = ACCEPTED \
        :: !(guard) -> res = REJECTED \
        fi \
    }; \
    goto wf_tail                             /* one copy of (2), (3) and the response */
#endif

/* ---- worker slot ---------------------------------------------------------------------
 * One execution slot of a worker process with id `wid`. Two slots share wid 1 (a worker
 * with concurrency 2), so `locked_by` alone cannot tell a stale slot from the current one.
 */
proctype Worker(byte wid) {
    byte j;        /* job held (meaningful in `holding`) */
    byte mytok;    /* lock token received from job_claim, 0 = none */
    byte res;      /* outcome of the last write as this slot saw it */
#ifdef WORKFLOW
    bool wset;     /* this transaction settled an edge: (2) and (3) follow */
    bool wlock;    /* it holds C's row lock */
    byte wsnap;    /* STALE_SNAPSHOT: the other edge as the ending statement saw it */
#endif

end_idle:          /* idle: j = mytok = res = 0 (reset by every jump here) */
    /* job_claim: pending -> running, fresh token, attempt + 1, lease from the DB clock. With a
     * per-key limit it runs gated: the gate serialises claims, so counting the key's running
     * rows and taking the job is one step (CHOOSE_PENDING only offers a job while ROOM). */
#ifdef NO_GATE
    /* BUG: no gate. The statement's snapshot counts the key's running rows and picks a
     * pending row; another claim may commit before this one takes it. */
    atomic { CHOOSE_PENDING(j) };
    atomic {
        if
        :: job[j].st != PENDING -> GOTO_IDLE          /* row taken meanwhile (SKIP LOCKED) */
        :: else -> skip
        fi;
#else
    atomic {
        CHOOSE_PENDING(j);
#endif
#ifdef WORKFLOW
        /* C starts only once both parents completed and committed */
        assert(j != CJOB || (job[0].st == COMPLETED && job[1].st == COMPLETED && ecommitted[0] && ecommitted[1]));
        if
        :: j == CJOB -> job[j].st = COMPLETED; GOTO_IDLE    /* C's own run: the one-job model */
        :: else -> skip
        fi;
#endif
        job[j].fence++;
        job[j].tok = job[j].fence;
        job[j].st = RUNNING;
        job[j].by = wid;
        job[j].att++;
        job[j].age = 0;
        job[j].lease = LEASE;
        SLOT_TAKE;
        CHECK_LIMIT;                                  /* the key's running rows <= KEYLIMIT */
        mytok = job[j].tok;
        if
        :: goto holding
        :: losses < MAX_LOSS -> losses++; GOTO_IDLE   /* response lost: nobody works it */
        fi
    };

holding:
    if
    /* job_heartbeat (R3, R4) */
    :: WRITE(HEARTBEAT_CAS(j, wid, mytok),
             job[j].lease = RENEWED(j),
             res = 0; goto holding)
#ifdef WORKFLOW
    /* a parent's completion (job_complete_many) or dead letter (job_dead_letter) settles its
     * edge and may release or cancel C (C itself is never held: see the claim) */
    :: WF_WRITE(COMPLETE_CAS(j, wid, mytok),
             job[j].st = COMPLETED; CLEAR(j);
             completions[j]++;
             WF_ONE_COMPLETION(j),
             COMPLETED)
    :: WF_WRITE(HOLDS(j, wid, mytok),
             job[j].st = FAILED; CLEAR(j),
             FAILED)
#else
    /* job_complete_many */
    :: WRITE_OR(COMPLETE_CAS(j, wid, mytok),
             job[j].st = COMPLETED; CLEAR(j);
             completions[j]++;
             assert(completions[j] == 1),            /* never two accepted completions */
             GOTO_IDLE,
             seen = SLOTS; LATE_FREE; CHECK_LATE_FREE) /* refused: frees no slot */
    /* job_retry (retryable error, attempts left) */
    :: job[j].att < MAX_ATTEMPTS ->
       WRITE(HOLDS(j, wid, mytok),
             job[j].st = PENDING; CLEAR(j),
             GOTO_IDLE)
    /* job_dead_letter (permanent error, or attempts exhausted) */
    :: WRITE(HOLDS(j, wid, mytok),
             job[j].st = FAILED; CLEAR(j),
             GOTO_IDLE)
#endif
    /* job_release: shutdown drain hands the job back without using up an attempt (R8) */
    :: atomic { releases < MAX_RELEASE -> releases++ };
       WRITE(HOLDS(j, wid, mytok),
             job[j].st = PENDING; CLEAR(j);
             job[j].att = (job[j].att > 0 -> job[j].att - 1 : 0),
             GOTO_IDLE)
    /* crash (kill -9): the slot forgets its token; the restarted process starts idle */
    :: atomic { crashes < MAX_CRASH -> crashes++; GOTO_IDLE }
    fi;
#ifdef WORKFLOW
wf_tail:           /* after a parent's ending write: (2), (3), COMMIT, then the response */
    if :: res == ACCEPTED -> wf_release(j) :: else -> skip fi;
    atomic {
        if :: res != LOST -> MAY_LOSE(res) :: else -> skip fi;   /* a lost request has no response */
        DISPATCH(res, GOTO_IDLE)
    }
#endif
}

/* ---- reaper --------------------------------------------------------------------------
 * One reaper cycle: job_reap_candidates (reads the token, locks the row) then
 * job_reap_expired (CAS on the token read) and COMMIT. Anything not blocked by the row lock
 * may happen in between; the transaction may abort (row unlocked, nothing written).
 */
proctype Reaper() {
    byte j;
    byte rtok;
#ifdef WORKFLOW
    bool wset;     /* as in Worker: a dead letter of a parent settled its edge */
    bool wlock;
    byte wsnap;
#endif
end_reaper:
    do
    :: atomic { CHOOSE_REAPABLE(j); rtok = job[j].tok; TAKE_LOCK(j) };
       atomic {
           if
           :: losses < MAX_LOSS -> losses++                 /* transaction aborted */
           :: REAP_CAS(j, rtok) ->
                  assert(job[j].st == RUNNING);       /* never undo a terminal state (#1302) */
                  assert(job[j].lease < -GRACE);      /* never reap a healthy job (R7) */
                  if
                  :: job[j].att >= MAX_ATTEMPTS -> job[j].st = FAILED   /* dead letter */
                  :: job[j].st = FAILED                 /* dead letter: max_lease_expiries */
                  :: job[j].att < MAX_ATTEMPTS -> job[j].st = PENDING   /* requeue */
                  fi;
                  CLEAR(j)
#ifdef WORKFLOW
                  ; if                                  /* a parent's dead letter: workflow_settle */
                  :: j != CJOB && job[j].st == FAILED -> WF_SETTLE(j, FAILED, false)
                  :: else -> skip
                  fi
#endif
           :: !REAP_CAS(j, rtok) -> skip                    /* CAS lost: the job moved on */
           fi;
#ifndef WORKFLOW
           job[j].lock = false;                            /* COMMIT / ROLLBACK */
           j = 0; rtok = 0
       }
#else
#ifdef JUDGE_AFTER_COMMIT
           job[j].lock = false;                            /* COMMIT / ROLLBACK */
#else
           if :: !wset -> job[j].lock = false :: else -> skip fi;   /* else COMMIT after (3) */
#endif
           if :: !wset -> j = 0; rtok = 0 :: else -> skip fi
       };
       if :: wset -> wf_release(j); atomic { j = 0; rtok = 0 } :: else -> skip fi
#endif
    od
}

/* ---- the DB clock: time passes nondeterministically ---------------------------------- */
active proctype Clock() {
    byte k;
end_clock:
    do
    :: atomic {
           CAN_TICK ->
           for (k : 0 .. NJOBS - 1) {
               if
               :: job[k].st == RUNNING ->
                      if
                      :: job[k].lease > FLOOR -> job[k].lease--
                      :: else -> skip
                      fi;
                      if
                      :: job[k].age < MAX_TOTAL -> job[k].age++
                      :: else -> skip
                      fi
               :: else -> skip
               fi
           }
           k = 0
       }
    od
}

init {
    atomic {
#ifdef WORKFLOW
        job[CJOB].st = WAITING;
#endif
        run Worker(1);
        run Worker(1);
        run Worker(2);
        run Reaper();
#if NREAPERS > 1
        run Reaper();
#endif
    }
}

/* Liveness: every job eventually reaches a terminal state (completed or failed; with -DWORKFLOW
 * C too, so C is never stranded `waiting`: released, or cancelled by a failed parent).
 * spin -a lease.pml && cc -DNFAIR=3 -o pan pan.c && ./pan -a -f */
ltl live { <> ALL_TERMINAL }
