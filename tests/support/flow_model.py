"""A pure-Python reference model of the fair claim's decision, ``flow_claim`` in
src/tenure/core/sql/schema.sql (docs/flow.md, "How the claim decides"): the same lanes, ring,
rounds, skip list, quotas, probe budget, deficits and buckets, with no database.

It follows the SQL statement by statement, including what the SQL does that the docs do not say
(see :func:`claim`), so a test can hold the SQL to it. Time stands still in the model:
- a job's ``age`` is how many seconds ago it became available (``available_at = now() - age``;
  negative: in the future). It is aged when ``age >= aging`` and ready when ``age >= 0``.
- buckets do not refill. The claim refills a bucket by ``per_second`` times the time since its
  last take, so a test that compares with the database keeps ``per_second`` tiny.
Keys are ordered as Python orders strings (the C collation), and the database orders them by its
collation: use keys that every collation orders alike (lower-case letters and digits)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

UNKEYED = ""
"""The ring position of the jobs without a key (flow_claim's ``''``): first in the ring."""


@dataclass(frozen=True)
class Job:
    """A pending job of the queue."""

    id: int
    key: str | None = None
    priority: int = 0
    age: float = 60.0
    rate_limit: str | None = None
    units: int = 1


@dataclass(frozen=True)
class RateLimit:
    """A row of ``rate_limits`` (per_second does not matter: the model's clock stands still)."""

    burst: int
    per_key: bool = False


@dataclass(frozen=True)
class Bucket:
    """A row of ``rate_buckets``: its tokens, and whether a handler's pause still holds it."""

    tokens: float
    paused: bool = False


BucketId = tuple[str, str]
"""(limit name, flow key): the flow key is ``''`` for a shared limit and for jobs without a key."""


@dataclass(frozen=True)
class QueueState:
    """What flow_claim reads of one queue (and of the rate limits its jobs name)."""

    jobs: tuple[Job, ...] = ()
    running: Mapping[str, int] = field(default_factory=dict)
    """Running jobs per flow key."""
    running_unkeyed: int = 0
    """Running jobs without a key (they count towards ``max_running`` only)."""
    key_running: Mapping[str, int] = field(default_factory=dict)
    """``flow_keys.running``: a key's own running limit."""
    weights: Mapping[str, float] = field(default_factory=dict)
    """``flow_keys.weight`` of the keys whose weight is not 1."""
    deficits: Mapping[str, float] = field(default_factory=dict)
    """``flow_keys.deficit`` (read only for a key that has a row)."""
    per_key_running: int | None = None
    max_running: int | None = None
    cursor: str | None = None
    aging: float = 300.0
    paused: bool = False
    rate_limits: Mapping[str, RateLimit] = field(default_factory=dict)
    buckets: Mapping[BucketId, Bucket] = field(default_factory=dict)

    def has_row(self, key: str) -> bool:
        """Whether the key has a ``flow_keys`` row (a running limit or a weight of its own)."""
        return key in self.key_running or key in self.weights

    @property
    def running_total(self) -> int:
        return sum(self.running.values()) + self.running_unkeyed


@dataclass(frozen=True)
class Claim:
    """What one flow_claim call decides."""

    ids: tuple[int, ...]
    """The claimed jobs, in claim order."""
    cursor: str | None
    deficits: dict[str, float]
    buckets: dict[BucketId, Bucket]
    held: bool
    """A rate limit held a job back (flow_claim's last row, whose id is NULL)."""
    probes: int
    """Key probes spent of the budget (8 x room + 64, the room after ``max_running``)."""


def claim(state: QueueState, want: int) -> Claim:
    """The jobs ``flow_claim(q, want, aging, ...)`` takes from ``state``, and what it leaves.

    Where the SQL goes beyond docs/flow.md, the model does as the SQL does:
    - the ring is ``''``, then the keys with pending jobs at the level not taken yet in the
      call (scheduled ones too): each probe finds the next such key after the last position, so
      a key whose jobs the call took leaves the ring (and a round may end sooner);
    - the ``''`` position is visited even when no unkeyed job is ready (a finished visit, so the
      cursor can come to rest on ``''``); a key whose pending jobs at the level all lie in the
      future is stepped over, without a visit;
    - a visit's share is the rest of the room for the key alone (``solo``: the one key that took
      jobs in the last whole round of the level, when no key banked in it), else the stored
      deficit when it is 1 or more (the rest of a visit cut short), else weight + deficit; its
      quota is the share's whole jobs, within the key's free running slots and the room;
    - a visit is over when drained, or when it took ``least(floor(share), free slots)`` jobs,
      the free slots being the claim's whole room for a key without a running limit: so a visit
      that took the whole room of its claim is over too (the rest of its share is dropped), and
      only one cut short after other jobs of the claim is "cut short by the room";
    - the cursor moves past a visit that is over, past a visit that banked (share below one job,
      a ready job there), and past keys stepped over (skipped, at their running limit, nothing
      ready, '' found empty), except after a bucket held a key back in the claim (``hold``):
      then only a visit that took a job or banked moves it;
    - the deficit is written for keys with a ``flow_keys`` row whose weight or deficit is not
      1 and 0: 0 when drained or solo, the share when banked, ``share - taken`` when cut short
      (room or bucket), else the fraction of ``share - taken``;
    - a round without progress (a job taken or a share banked) ends the level;
    - the '' position costs no probe; every other step of the ring costs one."""
    run = _Run(state, want)
    run.run()
    return Claim(ids=tuple(run.picked), cursor=run.cur, deficits=run.deficits, buckets=run.buckets,
                 held=run.held, probes=run.budget0 - run.budget)


def after(state: QueueState, done: Claim) -> QueueState:
    """The state once ``done`` is committed: its jobs are running, and the cursor, deficits and
    buckets are the claim's."""
    taken = set(done.ids)
    running = dict(state.running)
    unkeyed = state.running_unkeyed
    for job in state.jobs:
        if job.id in taken:
            if job.key is None:
                unkeyed += 1
            else:
                running[job.key] = running.get(job.key, 0) + 1
    return replace(state, jobs=tuple(j for j in state.jobs if j.id not in taken), running=running,
                   running_unkeyed=unkeyed, cursor=done.cursor, deficits=dict(done.deficits),
                   buckets=dict(done.buckets))


def claims(state: QueueState, wants: Iterable[int]) -> tuple[list[Claim], QueueState]:
    """Consecutive claims (each committed before the next) and the state after the last."""
    out = []
    for want in wants:
        done = claim(state, want)
        out.append(done)
        state = after(state, done)
    return out, state


def _fifo(job: Job) -> tuple[float, int]:
    return (-job.age, job.id)  # available_at, then id


@dataclass
class _Round:
    """flow_claim's round variables: where the round started, whether it made progress, how many
    visits took jobs, whether one banked, and the key alone (``solo``) from the round before."""

    start: str | None
    progress: bool = False
    takers: int = 0
    banked: bool = False
    solo: str | None = None

    def next(self, pos: str | None, last_taker: str | None) -> None:
        self.solo = last_taker if self.takers == 1 and not self.banked else None
        self.progress = self.banked = False
        self.takers = 0
        self.start = pos


class _Run:
    """One call of flow_claim: its variables, named as in the SQL."""

    def __init__(self, state: QueueState, want: int) -> None:
        self.s = state
        self.want = want
        self.picked: list[int] = []
        self.pick_keys: list[str] = []
        self.skip: list[str] = []
        self.budget = self.budget0 = 0
        self.cur = state.cursor
        self.deficits = dict(state.deficits)
        self.buckets = dict(state.buckets)
        self.held = False
        """retry_at IS NOT NULL: a bucket held a job back."""
        self.hold = False
        """A bucket held a key back earlier in this claim (the SQL's ``hold``)."""
        self.last_pos: str | None = None
        """The ring position the last level stopped at (the SQL's ``pos``)."""
        self.room = 0
        self.last_taker: str | None = None

    def run(self) -> None:
        s = self.s
        if s.paused:
            return
        self.room = self.want
        if s.max_running is not None:
            self.room = min(self.room, s.max_running - s.running_total)
        if self.room <= 0:
            return
        self.budget = self.budget0 = 8 * self.room + 64
        self.aged_lane()
        lvl = 32767
        while len(self.picked) < self.room and self.budget > 0:
            below = [j.priority for j in s.jobs if j.age >= 0 and j.priority < lvl]
            if not below:
                break
            lvl = max(below)
            self.level(lvl)
        if self.budget <= 0 and self.last_pos is not None:
            self.cur = self.last_pos  # a claim that spent its budget leaves the cursor where it stopped

    def cap(self, key: str) -> int | None:
        own = self.s.key_running.get(key)
        return own if own is not None else self.s.per_key_running

    def pick(self, job: Job, key: str) -> None:
        self.picked.append(job.id)
        self.pick_keys.append(key)

    def rate_take(self, job: Job, key: str) -> bool:
        """rate_take(): True when the bucket held the job's units (and gave them); a job that
        needs more than the burst (lowered since) takes a full bucket."""
        assert job.rate_limit is not None
        limit = self.s.rate_limits.get(job.rate_limit)
        if limit is None:  # deleted since the job was enqueued: limits nothing
            return True
        bid = (job.rate_limit, key if limit.per_key else UNKEYED)
        bucket = self.buckets.get(bid)
        if bucket is None:  # the first claim that needs it creates it, full, and keeps it
            bucket = self.buckets[bid] = Bucket(float(limit.burst))
        need = min(job.units, limit.burst)
        have = min(limit.burst, bucket.tokens)
        if bucket.paused or have < need:
            self.held = True
            return False
        self.buckets[bid] = Bucket(have - need)
        return True

    def aged_lane(self) -> None:
        """Of the oldest 4 x room jobs ready longer than ``aging``, one per key, the keys in ring
        order from the cursor (``''`` first when there is none), each key's oldest first; each
        job taken moves the cursor to its key."""
        aged = sorted((j for j in self.s.jobs if j.age >= self.s.aging), key=_fifo)[:4 * self.room]
        start = self.cur
        aged.sort(key=lambda j: (start is not None and (j.key or UNKEYED) <= start, j.key or UNKEYED, _fifo(j)))
        for job in aged:
            if len(self.picked) >= self.room:
                break
            key = job.key or UNKEYED
            if key in self.skip or key in self.pick_keys:
                continue
            if key != UNKEYED:
                cap = self.cap(key)
                if cap is not None and self.s.running.get(key, 0) >= cap:
                    self.skip.append(key)
                    continue
            if job.rate_limit is not None and not self.rate_take(job, key):
                self.skip.append(key)
                self.hold = True
                continue
            self.pick(job, key)
            self.cur = key

    def level(self, lvl: int) -> None:
        """One priority level: rounds of the ring from the cursor while a round makes progress."""
        at_level = [j for j in self.s.jobs if j.key is not None and j.priority == lvl]
        rnd = _Round(start=self.cur)
        pos = self.last_pos = self.cur
        wrapped = False
        head: Job | None = None
        while len(self.picked) < self.room and self.budget > 0:
            if pos is None:
                nk: str | None = UNKEYED
            else:
                self.budget -= 1
                head = self.probe(at_level, pos)
                nk = head.key if head is not None else None
            if nk is None:  # past the last key: back to the start of the ring
                if wrapped or rnd.start is None:  # a whole round has passed
                    if not rnd.progress:
                        return
                    rnd.next(pos, self.last_taker)
                wrapped = True
                pos = self.last_pos = None
                continue
            if wrapped and rnd.start is not None and nk > rnd.start:  # a whole round
                if not rnd.progress:
                    return
                rnd.next(pos, self.last_taker)
                wrapped = False
            pos = self.last_pos = nk
            if nk in self.skip or (nk != UNKEYED and head is not None and head.age < 0):  # stepped over
                if not self.hold:
                    self.cur = pos
                continue
            self.visit(nk, lvl, rnd)

    def probe(self, at_level: list[Job], pos: str) -> Job | None:
        """The ring's next key after ``pos``: the first pending job not taken yet (scheduled ones
        too) of the lowest key above ``pos`` at the level, FIFO."""
        after = [j for j in at_level if j.key is not None and j.key > pos and j.id not in self.picked]
        return min(after, key=lambda j: (j.key or UNKEYED, _fifo(j))) if after else None

    def visit(self, nk: str, lvl: int, rnd: _Round) -> None:
        """A visit of key ``nk`` (a key at its running limit is skipped from now on)."""
        s = self.s
        cap, w, d, has_row = None, 1.0, 0.0, False
        if nk != UNKEYED:
            if s.has_row(nk):
                cap, w, d, has_row = s.key_running.get(nk), s.weights.get(nk, 1.0), self.deficits.get(nk, 0.0), True
            cap = cap if cap is not None else s.per_key_running
        if cap is not None:
            cap -= s.running.get(nk, 0) + self.pick_keys.count(nk)
            if cap <= 0:  # at its running limit
                self.skip.append(nk)
                if not self.hold:
                    self.cur = nk
                return
        left = self.room - len(self.picked)
        share = float(left) if nk == rnd.solo else d if d >= 1 else w + d
        whole = math.floor(share)
        cap_or_share = cap if cap is not None else whole
        quota = min(whole, cap_or_share, left)
        line = sorted((j for j in s.jobs if (j.key or UNKEYED) == nk and j.priority == lvl and j.age >= 0
                       and j.id not in self.picked), key=_fifo)
        drained = held = False
        if whole < 1:  # a weight below 1 banks its share: progress only if a job is there to take
            drained = not line
            if not drained:
                rnd.progress = rnd.banked = True
                if not self.hold:
                    self.cur = nk
        took = 0
        for job in line[:max(quota, 0)]:
            if job.rate_limit is not None and not self.rate_take(job, nk):
                self.skip.append(nk)
                held = self.hold = True
                break
            self.pick(job, nk)
            took += 1
        drained = drained or (whole >= 1 and not held and took < quota)
        if took > 0:
            rnd.progress = True
            rnd.takers += 1
            self.last_taker = nk
        over = min(whole, cap_or_share)  # a visit that took this many is over
        if whole >= 1 and not held and (drained or took >= over):
            if not self.hold:
                self.cur = nk
        elif whole < 1 and drained and not self.hold:
            self.cur = nk
        if has_row and (w != 1 or d != 0):
            self.deficits[nk] = (0.0 if drained or nk == rnd.solo else share if whole < 1
                                 else share - took if held or took < over
                                 else (share - took) - math.floor(share - took))
