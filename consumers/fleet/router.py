"""Bounded-load routing of requests to workers: a voice stays where its profile is hot,
a popular voice is shared by as many workers as its traffic keeps busy, and only what
exceeds a worker's share moves on.

    statuses (tts.fleet, via FleetView; when each was heard: hearing.py) -> apply(): who
        owns which partition of each lane, what waits for each worker (`others`: the
        fleet's load less this router's own); a lane's shard topic
        (tts.requests[.interactive].shards, wider than the plain one) as soon as a live
        worker says it holds some of it, else its plain topic
    route(voice, lane) -> the voice's preference list, walked lazily: shard 0, 1, 2, ...
        -> murmur2(routing key) -> partition -> its live owner, each worker once (a
        consistent-hash order of the workers, fixed per voice while ownership holds)
        -> the voice's copies: the first d of its order, d = share x workers / copy_share
           (its share of this router's recent requests, at least 1): a rare voice has its
           home only, a narrator or a brand voice every worker
        1. the least loaded of: its copies while a device slot is free there, up to
           `home_queue` wait or it is within its share; the workers holding its profile
           (their status lists it as hot) while within its share
        2. else the next worker in its order within its share (a profile build there),
        3. else the first with a slot free or within its share, 4. else the least loaded
        then, when that worker has no free slot and the voice has copies: a copy within
        its share where this router's earlier requests of the voice still wait instead
        (the new one joins their batch: one more item on a call, not a call of its own)
           -> Route(key, partition, worker, sharded: which of the lane's topics, reason:
              home, copy, held, joined or moved: ROUTE_REASONS)
    sent(request_id, route) / done(request_id): this router's own outstanding requests per
        worker, counted at once, so a burst is spread before the next status arrives; sent()
        also counts the voice's popularity (decayed, half-life POPULARITY_HALF_LIFE)

Why copies by popularity (W-Choices and D-Choices for skewed keys, Nasir et al., 2016):
under Zipf traffic a few voices carry half the requests. They are the ones to balance the
fleet with: each of their copies is busy enough to stay in its worker's cache, so routing
them to the least loaded copy costs no profile build. The rare voices, the other half of
the traffic and most of the voices, then stay home, waiting for a slot rather than moving:
moving one costs a build now and pushes a home voice out of another worker's cache, which
is how moving any voice whose home had no free slot kept the Zipf hit ratio at 0.87
(docs/routing.md).

Why join a waiting batch: past nominal load every worker queues, and a popular voice spread
over all its copies waits in four queues, one request each, for four calls. Sent where its
own requests already wait, it rides on their call (a batch of n costs one call plus a little
per item), so the fleet carries more than one request per slot and call. Only within the
voice's share, so a pile-up cannot push a worker's home voices out (docs/routing.md).

"Its share" is consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam,
2018): load + 1 <= balance * (total + 1) / workers; the floors (a free slot, `home_queue`)
keep a voice where it is while that costs no more than a short wait. Since the least loaded
worker is never over the mean, some worker always fits, so the busiest worker holds at
most max(slots + home_queue, balance x mean) requests. Without a view (no status yet, or
none live) a route is the plain voice_id with no partition: Kafka's partitioner decides, as
before.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import islice
from typing import TypeVar

from consumers.fleet.hearing import Hearing
from topics.fleet import (
    MAX_SHARD,
    STALE_INTERVALS,
    LaneLoad,
    RouteLane,
    WorkerStatus,
    routing_key,
)
from topics.partitioning import partition_for

_K = TypeVar("_K")
LANES: tuple[RouteLane, ...] = ("batch", "interactive")
MAX_REMEMBERED = 100_000  # voices' preference lists kept; past that they are walked afresh
# A voice's popularity is its share of this router's last few thousand requests: long
# enough that a voice of 1 % is told from one of 0.1 %, short enough that a narrator's
# job is spread within its first lines.
POPULARITY_HALF_LIFE = 2000  # requests
HOME_QUEUE = 6  # VF_ROUTE_HOME_QUEUE's default
# Why a route went where it did: its home (the first worker of its order), another of its
# copies, a worker that holds its profile anyway, the copy where this router's requests of
# it wait (joined their batch), or none of those: moved, a profile build there. Unrouted:
# no live worker in the view, the plain voice_id for Kafka's partitioner.
ROUTE_REASONS = ("home", "copy", "held", "joined", "moved", "unrouted")
COPY_SHARE = 0.02  # VF_ROUTE_COPY_SHARE's default


@dataclass(frozen=True)
class Route:
    key: str  # the record key: a routing key
    shard: int
    partition: int | None  # None: no view, the producer's partitioner picks from the key
    worker: str | None  # who owns that partition now, as the view said
    sharded: bool = False  # the partition is of the lane's shard topic, not its plain one
    # Why that worker (ROUTE_REASONS); not part of where the request goes, so not compared.
    reason: str = field(default="unrouted", compare=False)


@dataclass
class _Walk:
    """A voice's preference list in one lane, computed as far as a route needed it."""

    found: list[tuple[int, int, str]] = field(default_factory=list)  # (shard, partition, worker)
    seen: set[str] = field(default_factory=set)
    next_shard: int = 0


class FleetRouter:
    def __init__(self, *, partitions: int, balance: float = 1.25, home_queue: int = HOME_QUEUE,
                 copy_share: float = COPY_SHARE, clock: Callable[[], float] = time.monotonic,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        if balance < 1.0:
            raise ValueError(f"balance must be >= 1.0 (1.25 is the usual), got {balance}")
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        if home_queue < 0:
            raise ValueError(f"VF_ROUTE_HOME_QUEUE must be >= 0, got {home_queue}")
        if not 0 < copy_share <= 1:
            raise ValueError(f"VF_ROUTE_COPY_SHARE must be within (0, 1], got {copy_share}")
        self.partitions = partitions  # the plain lanes' count
        self._configured = partitions  # what the topic had when this router was made
        # Per lane: the partition count routes hash over, and whether that is the shard topic.
        self._spans: dict[str, tuple[int, bool]] = {}
        self.balance = balance
        self.home_queue = home_queue
        self.copy_share = copy_share
        self._wall_ms = wall_ms
        self._status: dict[str, WorkerStatus] = {}
        self.hearing = Hearing(clock)  # when each status arrived; the view marks its reads
        self._others: dict[tuple[str, str], int] = {}  # (lane, worker) -> load not ours
        self._mine: dict[tuple[str, str], int] = {}  # (lane, worker) -> ours outstanding
        self._routed: dict[str, tuple[str, str, str]] = {}  # request_id -> (lane, worker, voice)
        self._voice_at: dict[tuple[str, str, str], int] = {}  # (lane, worker, voice) -> ours out
        # Sent by a sender that never hears the answers, since the worker's last status
        # (which counts them from then on): cleared by each status.
        self._recent: dict[tuple[str, str], int] = {}
        self._owners: dict[str, dict[int, str]] | None = None  # None: rebuild on next use
        self._walks: dict[tuple[str, str], _Walk] = {}
        self._live: list[str] = []  # the workers the owner map was built from
        self._hot: dict[str, frozenset[str]] = {}  # worker -> voices its status says it holds
        self._turns: dict[str, int] = {}  # voice -> ties broken so far (_least_loaded)
        self._decay = 0.5 ** (1 / POPULARITY_HALF_LIFE)
        self._tick = 0  # requests counted by sent()
        self._score: dict[str, tuple[float, int]] = {}  # voice -> (decayed count, at tick)

    # -- the view ------------------------------------------------------------------------

    def apply(self, status: WorkerStatus, *, replayed: bool = True) -> None:
        """A worker's newest status (older ones than held are ignored).

        A `replayed` one (read from tts.fleet's history, not as it was written) is judged by
        its own timestamp against this host's clock, so a worker that died without a
        tombstone is not taken for a live one. A status read as it was written is taken
        whatever its timestamp says: the worker just spoke, and a worker host whose clock
        runs behind this one's by more than three intervals would otherwise never be
        routed to. Its silences are judged by this process's clock alone (alive())."""
        held = self._status.get(status.worker)
        if held is not None and held.at_ms > status.at_ms:
            return
        if replayed and status.stale_after_ms() < self._wall_ms():  # a dead worker's last word
            self.remove(status.worker)
            return
        changed = held is None or any(
            _ownership(held.lane(n)) != _ownership(status.lane(n))
            for n in LANES) or held.draining != status.draining
        self._status[status.worker] = status
        self.hearing.heard(status.worker)
        self._hot[status.worker] = frozenset(status.hot)
        for lane in LANES:
            mine = self._mine.get((lane, status.worker), 0)
            self._others[(lane, status.worker)] = max(0, status.lane(lane).load - mine)
            self._recent.pop((lane, status.worker), None)
        if changed:
            self._invalidate()

    def remove(self, worker: str) -> None:
        """The worker is gone (a tombstone on tts.fleet, or it went stale)."""
        self._hot.pop(worker, None)
        if self._status.pop(worker, None) is not None:
            self.hearing.forget(worker)
            self._invalidate()

    def alive(self, worker: str | None) -> bool:
        """Not draining, and heard within its last STALE_INTERVALS intervals as of the
        view's last read (hearing.py: a stalled process is not a fleet gone quiet)."""
        if worker is None or worker not in self._status:
            return False
        status = self._status[worker]
        return (not status.draining and self.hearing.silent_ms(worker)
                <= STALE_INTERVALS * status.interval_ms)

    def statuses(self) -> list[WorkerStatus]:
        """Every worker's newest status held now, by worker ID (a read-only copy)."""
        return [self._status[w] for w in sorted(self._status)]

    def workers(self, lane: RouteLane) -> list[str]:
        return sorted(set(self._owner_map(lane).values()))

    def order(self, voice_id: str, lane: RouteLane = "batch") -> list[tuple[int, int, str]]:
        """The voice's preference list in `lane` as ownership stands: (shard, partition,
        worker) for each live worker, its home first; the partition is of the lane's shard
        topic while `span(lane)` says so, else of its plain topic."""
        return list(self._preferences(voice_id, lane, self._owner_map(lane)))

    def span(self, lane: RouteLane) -> tuple[int, bool]:
        """(the partitions `lane`'s routes hash over, whether they are its shard topic's):
        the shard topic as soon as a live worker holds part of it, else the plain one."""
        self._owner_map(lane)
        return self._spans.get(lane, (self.partitions, False))

    def _invalidate(self) -> None:
        self._owners = None
        self._walks.clear()

    def _owner_map(self, lane: str) -> dict[int, str]:
        """partition -> its live owner; the status read last wins a partition two claim."""
        if self._owners is not None and all(self.alive(w) for w in self._live):
            return self._owners.get(lane, {})
        for gone in [w for w in self._status if not self.alive(w)
                     and not self._status[w].draining]:
            self._status.pop(gone)
            self.hearing.forget(gone)
        owners: dict[str, dict[int, str]] = {lane: {} for lane in LANES}
        live = sorted((s for s in self._status.values() if not s.draining),
                      key=lambda s: self.hearing.order(s.worker))
        # The lanes may have been grown since this router started: the workers say so.
        self.partitions = max([self._configured, *(s.lane(n).topic_partitions
                                                   for s in live for n in LANES)])
        for name in LANES:
            # A lane's shard topic once any live worker holds part of it (workers of
            # before hold none and keep the plain topic's plain-keyed records).
            wide = max((s.lane(name).shard_partitions for s in live
                        if s.lane(name).shards), default=0)
            span = (wide, True) if wide else (self.partitions, False)
            self._spans[name] = span
            for status in live:
                held = status.lane(name).shards if span[1] else status.lane(name).partitions
                for p in held:
                    if 0 <= p < span[0]:
                        owners[name][p] = status.worker
        self._owners = owners
        self._live = [s.worker for s in live]
        self._walks.clear()
        return owners.get(lane, {})

    # -- routing -------------------------------------------------------------------------

    def load(self, lane: RouteLane, worker: str) -> int:
        """What waits for `worker` in `lane`: the fleet's last word plus ours since."""
        slot = (lane, worker)
        return self._others.get(slot, 0) + self._mine.get(slot, 0) + self._recent.get(slot, 0)

    def route(self, voice_id: str, lane: RouteLane = "batch", *,
              avoid: Iterable[str] = (), balance: float | None = None) -> Route:
        """Where `voice_id`'s next request in `lane` goes; `avoid` names workers not to use
        (a failover's first choice), `balance` overrides the router's own for this call."""
        owners = self._owner_map(lane)
        skip = set(avoid)
        workers = set(owners.values()) - skip
        if not workers:
            return Route(key=routing_key(voice_id), shard=0, partition=None, worker=None)
        total = sum(self.load(lane, w) for w in workers)
        fair = (balance or self.balance) * (total + 1) / len(workers)

        def spread(worker: str, load: int) -> bool:  # within its share: bounded loads
            return load + 1 <= fair

        def free(worker: str, load: int) -> bool:  # ... or a device slot free
            return load + 1 <= max(self._slots(lane, worker), fair)

        def at_home(worker: str, load: int) -> bool:  # ... or up to home_queue waiting
            return load + 1 <= max(self._slots(lane, worker) + self.home_queue, fair)

        hot = {w for w in workers if voice_id in self._hot.get(w, ())}
        sharded = self._spans.get(lane, (0, False))[1]
        walk = self._walk_fit(voice_id, lane, owners, skip)
        # Its copies: the first `copies` workers of its order (its home alone for most).
        # They may queue up to home_queue: a rare voice waits at home rather than moving.
        # A worker holding the profile otherwise (it moved there once) costs no build
        # either, but only within its share: a voice moved once is not held on two workers.
        order = (w for _, _, w in self._preferences(voice_id, lane, owners) if w not in skip)
        head = list(islice(order, self.copies(voice_id, len(workers))))
        copies = set(head)
        steps: list[Callable[[], tuple[int, int, int, str] | None]] = [
            lambda: self._least_loaded(voice_id, lane, owners, copies | hot,
                                       lambda w, load: at_home(w, load) if w in copies
                                       else spread(w, load)),
            lambda: walk(spread),
            lambda: walk(free)]
        for step in steps:
            if (best := step()) is not None:
                break
        else:
            best = self._least_of(voice_id, lane, owners, skip)
        joined = None
        if (best[0] + 1 > self._slots(lane, best[3]) and len(copies) > 1
                and (lane, best[3], voice_id) not in self._voice_at):
            joined = self._join(voice_id, lane, owners, copies, spread)
        worker = (joined or best)[3]
        reason = ("joined" if joined is not None else "home" if head and worker == head[0]
                  else "copy" if worker in copies else "held" if worker in hot else "moved")
        return self._route(voice_id, joined or best, sharded, reason)

    def _join(self, voice_id: str, lane: RouteLane, owners: dict[int, str], copies: set[str],
              fits: Callable[[str, int], bool]) -> tuple[int, int, int, str] | None:
        """(load, shard, partition, worker) of the copy where most of this router's
        requests of the voice wait (no free slot there), within its share; None if none."""
        best: tuple[int, int, int, str] | None = None
        most = 0
        for shard, partition, worker in self._preferences(voice_id, lane, owners):
            waiting = self._voice_at.get((lane, worker, voice_id), 0)
            load = self.load(lane, worker)
            if (worker in copies and waiting > most and load >= self._slots(lane, worker)
                    and fits(worker, load)):
                best, most = (load, shard, partition, worker), waiting
        return best

    def _walk_fit(self, voice_id: str, lane: RouteLane, owners: dict[int, str],
                  skip: set[str]) -> Callable[[Callable[[str, int], bool]],
                                              tuple[int, int, int, str] | None]:
        """The first worker in the voice's order that passes a test, as a function."""
        def first(test: Callable[[str, int], bool]) -> tuple[int, int, int, str] | None:
            for shard, partition, worker in self._preferences(voice_id, lane, owners):
                load = self.load(lane, worker)
                if worker not in skip and test(worker, load):
                    return load, shard, partition, worker
            return None
        return first

    def _least_of(self, voice_id: str, lane: RouteLane, owners: dict[int, str],
                  skip: set[str]) -> tuple[int, int, int, str]:
        """The least loaded worker of the voice's order (earliest on a tie): the bound
        says one always fits, so this is only reached by rounding."""
        found = [(self.load(lane, w), shard, p, w)
                 for shard, p, w in self._preferences(voice_id, lane, owners) if w not in skip]
        return min(found, key=lambda f: f[0])

    def _least_loaded(self, voice_id: str, lane: RouteLane, owners: dict[int, str],
                      among: set[str], fits: Callable[[str, int], bool],
                      ) -> tuple[int, int, int, str] | None:
        """(load, shard, partition, worker) of the least loaded of `among` that fits; a tie
        is taken in turn (per voice), so equally loaded copies share a voice evenly rather
        than its home taking every request an idle fleet sends. None when none fits."""
        fitting: list[tuple[int, int, int, str]] = []
        seen = 0
        for shard, partition, worker in self._preferences(voice_id, lane, owners):
            if worker not in among:
                continue
            load = self.load(lane, worker)
            if fits(worker, load):
                fitting.append((load, shard, partition, worker))
            seen += 1
            if seen == len(among):
                break
        if not fitting:
            return None
        low = min(f[0] for f in fitting)
        ties = [f for f in fitting if f[0] == low]
        turn = self._turns.get(voice_id, 0)
        self._turns[voice_id] = turn + 1
        return ties[turn % len(ties)]

    @staticmethod
    def _route(voice_id: str, choice: tuple[int, int, int, str], sharded: bool,
               reason: str) -> Route:
        _, shard, partition, worker = choice
        return Route(routing_key(voice_id, shard), shard, partition, worker, sharded, reason)

    def _slots(self, lane: str, worker: str) -> int:
        status = self._status.get(worker)
        return status.lane(lane).slots if status is not None else 1

    def _preferences(self, voice_id: str, lane: str,
                     owners: dict[int, str]) -> Iterable[tuple[int, int, str]]:
        """The voice's workers in shard order, each once; extended lazily and remembered
        until ownership changes."""
        if len(self._walks) > MAX_REMEMBERED:  # a long-lived router meets many voices
            self._walks.clear()
            self._turns.clear()
        walk = self._walks.setdefault((lane, voice_id), _Walk())
        yield from list(walk.found)
        span = self._spans.get(lane, (self.partitions, False))[0]
        every = set(owners.values())
        # Enough shards to meet every owner (coupon collector: ~n ln n for n workers).
        limit = min(MAX_SHARD, 64 + 16 * len(every))
        while len(walk.seen) < len(every) and walk.next_shard <= limit:
            shard = walk.next_shard
            walk.next_shard += 1
            partition = partition_for(routing_key(voice_id, shard), span)
            worker = owners.get(partition)
            if worker is None or worker in walk.seen:
                continue
            walk.seen.add(worker)
            walk.found.append((shard, partition, worker))
            yield shard, partition, worker

    # -- this router's own requests ---------------------------------------------------------

    def sent(self, request_id: str, route: Route, lane: RouteLane = "batch", *,
             answer_follows: bool = True) -> None:
        """Count a request just sent; `answer_follows=False` for a sender that will never
        call done() (it is counted until the worker's next status includes it)."""
        if route.worker is None:
            return
        voice = _voice_of(route.key)
        if not answer_follows:
            slot = (lane, route.worker)
            self._recent[slot] = self._recent.get(slot, 0) + 1
            self._count(voice)
            return
        if request_id not in self._routed:  # a re-route is the same request, counted once
            self._count(voice)
        self.done(request_id)  # a re-route replaces the first one
        self._routed[request_id] = (lane, route.worker, voice)
        _add(self._mine, (lane, route.worker), 1)
        _add(self._voice_at, (lane, route.worker, voice), 1)

    def done(self, request_id: str) -> None:
        routed = self._routed.pop(request_id, None)
        if routed is None:
            return
        lane, worker, _ = routed
        _add(self._mine, (lane, worker), -1)
        _add(self._voice_at, routed, -1)

    # -- popularity ---------------------------------------------------------------------

    def share(self, voice_id: str) -> float:
        """The voice's share of this router's recent requests (decayed counts, 0-1): of
        all it counted while it has counted few, so the lines of a `job run` just started
        are one voice's whole traffic from the first."""
        if not self._tick:
            return 0.0
        score, at = self._score.get(voice_id, (0.0, self._tick))
        counted = (1 - self._decay ** self._tick) / (1 - self._decay)  # all voices, decayed
        return float(score * self._decay ** (self._tick - at) / counted)

    def copies(self, voice_id: str, workers: int) -> int:
        """How many workers of its order the voice is balanced over: one for each
        `copy_share` of a worker's share of the traffic it brings (D-Choices), so every
        copy stays busy enough to keep its profile hot; its home alone for a rare voice."""
        wanted = math.ceil(self.share(voice_id) * workers / self.copy_share - 1e-9)
        return max(1, min(workers, wanted))

    def _count(self, voice: str) -> None:
        self._tick += 1
        score, at = self._score.get(voice, (0.0, self._tick))
        self._score[voice] = (score * self._decay ** (self._tick - at) + 1, self._tick)
        if len(self._score) > MAX_REMEMBERED:  # forget the voices that faded out
            floor = 0.5  # less than half a request left of them
            self._score = {v: (c, t) for v, (c, t) in self._score.items()
                           if c * self._decay ** (self._tick - t) >= floor}

    @property
    def outstanding(self) -> int:
        return len(self._routed)


def _voice_of(key: str) -> str:
    """The voice of a routing key (`voice_id` or `voice_id#shard`), unchecked: hot path."""
    return key.rsplit("#", 1)[0] if "#" in key else key


def _add(counts: dict[_K, int], key: _K, delta: int) -> None:
    """Add to a count that is dropped at zero, so the dicts hold only what is outstanding."""
    left = counts.get(key, 0) + delta
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)


def _ownership(load: LaneLoad) -> tuple[list[int], int, list[int], int]:
    """What of a lane's status decides the owner map (its load does not)."""
    return load.partitions, load.topic_partitions, load.shards, load.shard_partitions
