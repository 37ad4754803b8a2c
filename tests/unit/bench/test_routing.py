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
