from collections import Counter

import pytest

from bench.routing import least_conn, round_robin, voice_keyed
from topics.partitioning import partition_for


def test_voice_keyed_sends_a_voice_always_to_its_partition_owner() -> None:
    owners = {p: p // 3 for p in range(12)}  # range assignment of 12 partitions to 4
    voices = [f"voice-{i:04d}" for i in range(200)] * 3
    routes = voice_keyed(voices, owners, 12)
    assert routes == [partition_for(v, 12) // 3 for v in voices]
    by_voice: dict[str, set[int]] = {}
    for v, w in zip(voices, routes, strict=True):
        by_voice.setdefault(v, set()).add(w)
    assert all(len(ws) == 1 for ws in by_voice.values())


def test_voice_keyed_refuses_partitions_nobody_owns() -> None:
    with pytest.raises(ValueError, match=r"without an owner: \[11\]"):
        voice_keyed(["a"], {p: 0 for p in range(11)}, 12)


def test_round_robin_cycles() -> None:
    assert round_robin(6, 4) == [0, 1, 2, 3, 0, 1]


def test_least_conn_balances_and_is_deterministic() -> None:
    routes = least_conn(20_000, 4, seed=1)
    assert routes == least_conn(20_000, 4, seed=1)
    counts = Counter(routes)
    assert set(counts) == {0, 1, 2, 3}
    assert max(counts.values()) / min(counts.values()) < 1.05


def test_least_conn_at_low_load_rotates_through_idle_workers() -> None:
    # Nearly always idle: every worker has 0 in flight, ties go in turn like round-robin.
    routes = least_conn(400, 4, mean_service_s=0.001, utilisation=0.0001, seed=2)
    assert routes[:8] == [0, 1, 2, 3, 0, 1, 2, 3]


def test_least_conn_avoids_busy_workers() -> None:
    # Under heavy load a request never goes to a worker with more in flight than another.
    routes = least_conn(5000, 2, concurrency=1, utilisation=0.95, seed=3)
    assert routes != round_robin(5000, 2)


def test_least_conn_rejects_a_utilisation_outside_0_1() -> None:
    with pytest.raises(ValueError, match="utilisation"):
        least_conn(10, 4, utilisation=1.0)


def lru_hits(voices: list[str], routes: list[int], capacity: int, warm: int) -> float:
    """Hit ratio after `warm` requests of one LRU of `capacity` voices per worker."""
    from collections import OrderedDict

    caches: dict[int, OrderedDict[str, None]] = {}
    hits = 0
    for i, (v, w) in enumerate(zip(voices, routes, strict=True)):
        cache = caches.setdefault(w, OrderedDict())
        hit = v in cache
        cache[v] = None
        cache.move_to_end(v)
        if len(cache) > capacity:
            cache.popitem(last=False)
        hits += hit and i >= warm
    return hits / (len(voices) - warm)


def test_fleet_routing_keeps_zipf_voices_hot_within_a_bounded_wait() -> None:
    """The cache bench's quick trace (section 3): popular voices balance the fleet, rare
    ones stay home, so the hit ratio nears voice-keyed routing's while every worker gets
    its share; the wait for a slot stays within a fraction of a service time of
    least_conn's. With the old rule (home_queue 0: a voice moved whenever its home had no
    slot free) the same trace gave 0.85."""
    from bench.routing import fleet_routed
    from bench.workload import zipf_voices

    owners = {p: p // 3 for p in range(12)}
    voices = zipf_voices(20_000, 1000, 1.1, seed=11)
    warm = 12_000
    fleet_waits: list[float] = []
    lc_waits: list[float] = []
    routed = fleet_routed(voices, owners, 12, seed=11, waits=fleet_waits)
    nginx = least_conn(len(voices), 4, seed=11, waits=lc_waits)
    keyed = voice_keyed(voices, owners, 12)
    assert lru_hits(voices, routed, 256, warm) >= 0.96
    assert lru_hits(voices, routed, 256, warm) >= lru_hits(voices, keyed, 256, warm) - 0.03
    assert lru_hits(voices, nginx, 256, warm) < 0.85
    assert max(Counter(routed[warm:]).values()) <= 1.1 * (len(voices) - warm) / 4
    assert len(fleet_waits) == len(lc_waits) == len(voices)
    fleet_mean = sum(fleet_waits[warm:]) / (len(voices) - warm)
    lc_mean = sum(lc_waits[warm:]) / (len(voices) - warm)
    assert 0 < lc_mean < fleet_mean < lc_mean + 0.25
    old = fleet_routed(voices, owners, 12, seed=11, home_queue=0)
    assert lru_hits(voices, old, 256, warm) < 0.9
