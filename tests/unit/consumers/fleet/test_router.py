"""FleetRouter: bounded-load routing over statuses, without Kafka."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumers.fleet.router import HOME_QUEUE, POPULARITY_HALF_LIFE, FleetRouter, Route
from topics.fleet import LaneLoad, WorkerStatus, parse_routing_key, routing_key
from topics.partitioning import partition_for

NOW_MS = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def status(worker: str, partitions: list[int], *, slots: int = 2, load: int = 0,
           at_ms: int = NOW_MS, interval_ms: int = 500, draining: bool = False) -> WorkerStatus:
    lanes = {lane: LaneLoad(partitions=partitions, slots=slots, backlog=load)
             for lane in ("batch", "interactive")}
    return WorkerStatus(worker=worker, at_ms=at_ms, interval_ms=interval_ms, lanes=lanes,
                        draining=draining)


def fleet(workers: int, partitions: int, *, slots: int = 2, balance: float = 1.25,
          clock: Clock | None = None, home_queue: int = HOME_QUEUE) -> FleetRouter:
    """`workers` members with the range assignor's contiguous share of `partitions`."""
    router = FleetRouter(partitions=partitions, balance=balance, clock=clock or Clock(),
                         wall_ms=lambda: NOW_MS, home_queue=home_queue)
    per, extra = divmod(partitions, workers)
    start = 0
    for w in range(workers):
        n = per + (1 if w < extra else 0)
        router.apply(status(f"w{w}", list(range(start, start + n)), slots=slots))
        start += n
    return router


def test_without_a_view_the_route_is_the_plain_voice_id() -> None:
    router = FleetRouter(partitions=12)
    assert router.route("narrator") == Route("narrator", 0, None, None)


def test_an_idle_fleet_keeps_a_voice_on_its_shard_zero_owner() -> None:
    router = fleet(4, 12)
    route = router.route("narrator")
    assert (route.key, route.shard) == ("narrator", 0)
    assert route.partition == partition_for("narrator", 12)
    # The same partition Kafka's default partitioner gives a producer keying by voice_id.
    assert router.workers("batch")[route.partition // 3] == route.worker
    assert route.reason == "home"
    assert FleetRouter(partitions=12).route("narrator").reason == "unrouted"


def fade(router: FleetRouter, requests: int) -> None:
    """Other voices' traffic, sent and answered: what makes a voice's popularity fade."""
    for i in range(requests):
        route = Route(f"other-{i % 500}", 0, 0, "w0")
        router.sent(f"fade-{i}", route)
        router.done(f"fade-{i}")


def test_a_hot_voice_spreads_over_every_worker_and_goes_home_once_it_fades() -> None:
    router = fleet(4, 12, slots=2)
    home = router.route("narrator")
    routes = []
    for i in range(40):
        route = router.route("narrator")
        router.sent(f"r{i}", route)
        routes.append(route)
    per_worker = Counter(r.worker for r in routes)
    assert len(per_worker) == 4  # one voice, every worker
    # every worker a copy of the narrator: no request sent anywhere to load it from scratch
    assert {r.reason for r in routes} == {"home", "copy"}
    assert max(per_worker.values()) <= 1.25 * 40 / 4
    assert {parse_routing_key(r.key)[0] for r in routes} == {"narrator"}
    for i in range(40):
        router.done(f"r{i}")
    assert router.copies("narrator", 4) == 4  # still the whole traffic: shared by all
    fade(router, 20_000)  # ten half-lives of other voices
    assert router.copies("narrator", 4) == 1
    assert router.route("narrator") == home  # the load and the popularity gone: home


def test_a_free_slot_keeps_the_voice_home_whatever_the_mean() -> None:
    router = fleet(4, 12, slots=3, home_queue=0)
    fade(router, 2000)  # a rare voice among others: its home is its only copy
    first = router.route("narrator")
    for i in range(3):
        route = router.route("narrator")
        assert route == first  # 3 slots: no queueing yet, no profile moved
        router.sent(f"r{i}", route)
    assert router.route("narrator").worker != first.worker


def test_the_fleets_own_load_counts_from_each_status() -> None:
    router = fleet(2, 4, slots=1)
    home = router.route("narrator").worker
    assert home is not None
    other = next(w for w in router.workers("batch") if w != home)
    router.apply(status(home, [0, 1] if home == "w0" else [2, 3], slots=1, load=50,
                        at_ms=NOW_MS + 1))
    assert router.load("batch", home) == 50
    assert router.route("narrator").worker == other


def test_a_silent_worker_leaves_the_view_after_three_intervals() -> None:
    clock = Clock()
    router = fleet(3, 12, clock=clock)
    home = router.route("narrator").worker
    clock.t = 1.4  # under 3 x 0.5 s: still there
    assert router.alive(home) and router.route("narrator").worker == home
    for w in router.workers("batch"):
        if w != home:
            router.apply(status(w, [p for p in range(12) if p // 4 == int(w[1])],
                                at_ms=NOW_MS + 1600))
    clock.t = 1.6
    assert not router.alive(home)
    moved = router.route("narrator")
    assert moved.worker not in (home, None) and moved.shard > 0


def test_a_view_that_read_nothing_for_a_while_keeps_its_workers() -> None:
    """A stalled process (its view unread) has not heard the fleet: that is no silence of
    the workers. Once the view reads again, a worker that truly went quiet is gone."""
    clock = Clock()
    router = fleet(3, 12, clock=clock)
    router.hearing.mark_current()
    home = router.route("narrator").worker
    clock.t = 5.0  # the loop stalled: no read since 0.0
    assert router.alive(home) and router.route("narrator").worker == home
    router.hearing.mark_current(lag_s=4.0)  # read, but the broker's last answer is of 1.0
    assert router.alive(home)
    router.hearing.mark_current()  # read, and nobody had spoken since 0.0
    assert not router.alive(home) and router.route("narrator").worker is None


def test_draining_and_tombstoned_workers_get_nothing_new() -> None:
    router = fleet(2, 4)
    home = router.route("narrator").worker
    assert home is not None
    router.apply(status(home, [0, 1] if home == "w0" else [2, 3], draining=True,
                        at_ms=NOW_MS + 1))
    assert router.route("narrator").worker not in (home, None)
    router.remove("w0")
    router.remove("w1")
    assert router.route("narrator").worker is None


def test_avoid_skips_a_worker_and_stale_statuses_are_dropped() -> None:
    router = fleet(3, 12)
    home = router.route("narrator").worker
    assert home is not None
    assert router.route("narrator", avoid={home}).worker not in (home, None)
    router.apply(status("ghost", [0], at_ms=NOW_MS - 10_000))  # long dead: ignored
    assert "ghost" not in router.workers("batch")


def test_a_status_read_as_written_counts_whatever_its_hosts_clock_says() -> None:
    """Replayed history is judged by its timestamp (a dead worker's last word); a status
    read live is a worker that just spoke, from a host whose clock may run behind."""
    router = FleetRouter(partitions=4, clock=Clock(), wall_ms=lambda: NOW_MS)
    router.apply(status("behind", [0, 1], at_ms=NOW_MS - 5_000), replayed=False)
    assert "behind" in router.workers("batch")
    router.apply(status("dead", [2, 3], at_ms=NOW_MS - 5_000))  # replayed: its last word
    assert "dead" not in router.workers("batch")


def test_a_contested_partition_goes_to_the_claim_read_last_whatever_its_clock() -> None:
    """Mid-rebalance the old owner's status still claims a partition the new owner has
    claimed since; the new owner's host clock runs 2 s behind. The topic's order, not
    at_ms, says which claim is newer."""
    router = FleetRouter(partitions=2, clock=Clock(), wall_ms=lambda: NOW_MS)
    router.apply(status("old", [0, 1], at_ms=NOW_MS))
    router.apply(status("new", [1], at_ms=NOW_MS - 2_000), replayed=False)
    owners = {p: w for i in range(40) for _, p, w in router.order(f"v{i}")}
    assert owners == {0: "old", 1: "new"}


def test_a_request_routed_twice_counts_once() -> None:
    router = fleet(2, 4)
    a = router.route("v")
    router.sent("r1", a)
    router.sent("r1", router.route("v", avoid={a.worker or ""}))
    assert router.outstanding == 1
    router.done("r1")
    assert router.outstanding == 0


def test_a_sender_without_answers_is_counted_until_the_next_status() -> None:
    router = fleet(2, 4, slots=1)
    route = router.route("v")
    assert route.worker is not None
    for i in range(5):
        router.sent(f"j{i}", route, answer_follows=False)
    assert router.load("batch", route.worker) == 5 and router.outstanding == 0
    router.apply(status(route.worker, [0, 1] if route.worker == "w0" else [2, 3], slots=1,
                        load=3, at_ms=NOW_MS + 1))
    assert router.load("batch", route.worker) == 3


def test_balance_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="balance"):
        FleetRouter(partitions=12, balance=0.9)


def test_routing_keys_round_trip_and_reject_bad_shards() -> None:
    assert routing_key("v", 0) == "v" and routing_key("v", 7) == "v#7"
    assert parse_routing_key("v#7") == ("v", 7) and parse_routing_key("v") == ("v", 0)
    with pytest.raises(ValueError):
        routing_key("v", 10_000)
    with pytest.raises(ValueError):
        parse_routing_key("../x#1")


# -- the bound: busiest worker <= max(slots + home_queue, 1.25 x mean), 1-256 workers ---------

def zipf_voices(count: int, voices: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    weights = [1 / (k + 1) ** 1.1 for k in range(voices)]
    return [f"v{k}" for k in rng.choices(range(voices), weights=weights, k=count)]


@settings(max_examples=40, deadline=None)
@given(workers=st.integers(1, 256), voices=st.integers(10, 100_000),
       spread=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_busiest_worker_stays_within_the_bound(workers: int, voices: int, spread: int,
                                               seed: int) -> None:
    partitions = workers * spread  # a worker per partition at least, as a group needs
    router = fleet(workers, partitions, slots=1)
    count = max(50, workers * 8)
    for i, voice in enumerate(zipf_voices(count, voices, seed)):
        router.sent(f"r{i}", router.route(voice))
    loads = [router.load("batch", w) for w in router.workers("batch")]
    assert sum(loads) == count
    mean = count / workers
    assert max(loads) <= max(1 + router.home_queue, 1.25 * mean) + 1e-9, (max(loads), mean)


def test_one_voice_over_256_workers_meets_every_worker() -> None:
    router = fleet(256, 512, slots=1)
    for i in range(256 * 4):
        router.sent(f"r{i}", router.route("narrator"))
    loads = [router.load("batch", w) for w in router.workers("batch")]
    assert len(loads) == 256 and min(loads) >= 1 and max(loads) <= 1.25 * 4


def test_a_voice_hot_on_several_workers_goes_to_the_least_loaded_of_them() -> None:
    router = fleet(4, 12, slots=3)
    for w in range(4):
        router.apply(msgspec_replace(status(f"w{w}", list(range(3 * w, 3 * w + 3)), slots=3,
                                            at_ms=NOW_MS + 1), hot=["narrator"]))
    for i in range(40):
        router.sent(f"r{i}", router.route("narrator", "interactive"), "interactive")
    loads = [router.load("interactive", w) for w in router.workers("interactive")]
    assert loads == [10, 10, 10, 10]  # no slot-floor pile-up on the voice's home


def msgspec_replace(s: WorkerStatus, **changes: object) -> WorkerStatus:
    import msgspec

    return msgspec.structs.replace(s, **changes)


def test_grown_lanes_reported_by_the_workers_widen_the_router() -> None:
    router = FleetRouter(partitions=12, wall_ms=lambda: NOW_MS)
    for w in range(2):
        grown = status(f"w{w}", list(range(12 * w, 12 * w + 12)))
        for lane in grown.lanes.values():
            lane.topic_partitions = 24
        router.apply(grown)
    route = router.route("narrator")
    assert router.partitions == 24 and route.partition == partition_for("narrator", 24)


def test_a_rare_voice_waits_home_while_a_popular_one_takes_the_least_loaded_copy() -> None:
    router = fleet(2, 4, slots=2, home_queue=1)
    fade(router, 2000)  # the router has seen traffic: one request is a small share
    home = router.route("rare").worker
    assert home is not None and router.copies("rare", 2) == 1
    # Home busy with other voices' work: 2 running + 1 waiting is allowed (home_queue 1).
    for i in range(2):
        router.sent(f"o{i}", Route(f"x{i}", 0, 0, home))
    assert router.route("rare").worker == home
    router.sent("o2", Route("x2", 0, 0, home))
    moved = router.route("rare")
    assert moved.worker != home and moved.reason == "moved"  # 3 there: the wait costs more
    # the worker it would move to already holds the profile (it moved there once): held
    there = next(s for s in router.statuses() if s.worker == moved.worker)
    router.apply(msgspec_replace(there, at_ms=NOW_MS + 1, hot=["rare"]))
    assert router.route("rare").reason == "held"
    # A voice with a large share of the traffic has both workers as copies: it goes to
    # the less loaded one at once instead of queueing at home.
    for i in range(400):
        router.sent(f"p{i}", Route("popular", 0, 0, home))
        router.done(f"p{i}")
    assert router.copies("popular", 2) == 2
    assert router.route("popular").worker != home


def test_a_voice_gets_a_copy_per_copy_share_of_a_workers_traffic() -> None:
    router = FleetRouter(partitions=12, copy_share=0.02)
    assert router.copies("never-seen", 8) == 1
    for i in range(10_000):  # 10 % of the traffic is "mid", the rest spread thin
        voice = "mid" if i % 10 == 0 else f"thin-{i % 3000}"
        router.sent(f"r{i}", Route(voice, 0, 0, "w0"))
        router.done(f"r{i}")
    assert router.share("mid") == pytest.approx(0.1, rel=0.05)
    # 10 % of the traffic is 0.4 of one of 4 workers' share: 20 copies of 0.02, all 4.
    assert router.copies("mid", 4) == 4
    # Of 100 workers' it is 10 workers' share: 500 copies of 0.02 wanted, capped at 100.
    assert router.copies("mid", 100) == 100
    assert router.copies("thin-7", 4) == 1  # ~0.03 % of the traffic: its home only


def test_popularity_halves_per_half_life_and_a_reroute_counts_once() -> None:
    router, twin = FleetRouter(partitions=12), FleetRouter(partitions=12)
    for r in (router, twin):
        fade(r, 20 * POPULARITY_HALF_LIFE)  # long past the start: counts at steady state
    for i in range(100):
        router.sent(f"v{i}", Route("v", 0, 0, "w0"))
        router.sent(f"v{i}", Route("v#1", 1, 1, "w1"))  # a failover: the same request
        twin.sent(f"v{i}", Route("v", 0, 0, "w0"))
    before = router.share("v")
    assert before == pytest.approx(twin.share("v"))  # counted once
    assert before * POPULARITY_HALF_LIFE / math.log(2) == pytest.approx(100, rel=0.05)
    fade(router, POPULARITY_HALF_LIFE)
    assert router.share("v") == pytest.approx(before / 2, rel=1e-4)


def test_copy_share_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="VF_ROUTE_COPY_SHARE"):
        FleetRouter(partitions=12, copy_share=0)
    with pytest.raises(ValueError, match="VF_ROUTE_COPY_SHARE"):
        FleetRouter(partitions=12, copy_share=1.5)


def popular(router: FleetRouter, voice: str, workers: int) -> None:
    """Make `voice` a large share of what the router counted: copies on every worker."""
    for i in range(400):
        router.sent(f"{voice}-pop-{i}", Route(voice, 0, 0, "w0"))
        router.done(f"{voice}-pop-{i}")
    assert router.copies(voice, workers) == workers


def fill(router: FleetRouter, worker: str, count: int, voice: str = "other") -> None:
    for i in range(count):
        router.sent(f"{worker}-{voice}-{i}", Route(voice, 0, 0, worker))


def test_past_a_full_fleet_a_popular_voice_joins_its_own_waiting_batch() -> None:
    router = fleet(2, 4, slots=2)
    popular(router, "brand", 2)
    fill(router, "w0", 3)
    router.sent("b0", Route("brand", 0, 0, "w0"))  # w0: 4, one of them brand, waiting
    fill(router, "w1", 3)  # w1: 3, the least loaded, but a call of its own for brand there
    joined = router.route("brand")
    assert joined.worker == "w0"  # rides on the waiting request's call, within its share
    assert joined.reason == "joined"
    assert parse_routing_key(joined.key)[0] == "brand"


def test_no_join_while_a_slot_is_free_or_past_the_share_or_for_a_rare_voice() -> None:
    router = fleet(2, 4, slots=2)
    popular(router, "brand", 2)
    fill(router, "w0", 2)
    router.sent("b0", Route("brand", 0, 0, "w0"))  # brand waits on w0 (3 there)
    fill(router, "w1", 1)
    assert router.route("brand").worker == "w1"  # a slot free there: no wait, no join
    fill(router, "w0", 2, voice="more")  # w0: 5 ...
    fill(router, "w1", 2, voice="more")  # ... w1: 3; 5 + 1 > 1.25 x (8 + 1) / 2
    assert router.route("brand").worker == "w1"  # out of its share: no join
    # A voice with one copy (its home) is not balanced over copies: it never joins.
    rare_router = fleet(2, 4, slots=2)
    fade(rare_router, 2000)
    home = rare_router.route("rare").worker
    assert home is not None and rare_router.copies("rare", 2) == 1
    away = "w1" if home == "w0" else "w0"
    fill(rare_router, home, 3)
    fill(rare_router, away, 3)
    rare_router.sent("r0", Route("rare#1", 1, 0, away))  # it moved there once, still waits
    assert rare_router.route("rare").worker == home


# -- shard lanes: more workers than the plain lanes have partitions -------------------------

def sharded_fleet(workers: int, plain: int, shards: int) -> FleetRouter:
    """`workers` members with the range assignor's share of both pairs of lanes: members
    past `plain` hold shard partitions only."""
    router = FleetRouter(partitions=plain, clock=Clock(), wall_ms=lambda: NOW_MS)
    for w in range(workers):
        mine = [p for p in range(plain) if p * workers // plain == w] if workers <= plain \
            else ([w] if w < plain else [])
        lo, hi = w * shards // workers, (w + 1) * shards // workers
        lanes = {lane: LaneLoad(partitions=mine, topic_partitions=plain, slots=2,
                                shards=list(range(lo, hi)), shard_partitions=shards)
                 for lane in ("batch", "interactive")}
        router.apply(WorkerStatus(worker=f"w{w}", at_ms=NOW_MS, interval_ms=500, lanes=lanes))
    return router


def test_routes_go_to_the_shard_lanes_and_reach_workers_past_the_plain_partitions() -> None:
    router = sharded_fleet(6, plain=2, shards=12)
    assert router.workers("batch") == [f"w{w}" for w in range(6)]
    answered: Counter[str] = Counter()
    for i in range(600):
        route = router.route(f"voice-{i % 60}", "batch")
        assert route.sharded and route.partition is not None and 0 <= route.partition < 12
        assert route.partition == partition_for(route.key, 12)  # hashed over the shard topic
        assert route.worker is not None
        answered[route.worker] += 1
        router.sent(f"r{i}", route, "batch")
        if i >= 20:
            router.done(f"r{i - 20}")
    assert set(answered) == {f"w{w}" for w in range(6)}  # w2..w5 own no plain partition
    assert min(answered.values()) >= 600 / 6 / 2


def test_workers_of_before_keep_the_plain_lanes_and_routes_avoid_them() -> None:
    router = sharded_fleet(2, plain=4, shards=8)
    # A worker of before: plain partitions only, no shard topic in its status.
    router.apply(status("old", [], slots=2))
    routes = [router.route(f"v{i}", "interactive") for i in range(40)]
    assert all(r.sharded and r.worker in ("w0", "w1") for r in routes)
    plain_only = fleet(2, 4)  # no worker reads the shard lanes: routed on the plain ones
    assert not plain_only.route("v1").sharded
