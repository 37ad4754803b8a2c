from bench.restart import moved_fraction, settled
from topics.partitioning import partition_for

VOICES = [f"voice-{i:04d}" for i in range(300)]


def test_nothing_moves_when_every_snapshot_matches() -> None:
    before = {p: p % 4 for p in range(12)}
    assert moved_fraction(before, [dict(before), dict(before)], VOICES) == 0.0


def test_a_partition_owned_elsewhere_even_briefly_moves_its_voices() -> None:
    before = {p: p % 4 for p in range(12)}
    during = {p: o for p, o in before.items() if o != 0}  # worker 0 away: unowned, not moved
    taken = {**during, 0: 1}  # partition 0 served by worker 1 for a moment
    expected = sum(1 for v in VOICES if partition_for(v, 12) == 0) / len(VOICES)
    assert moved_fraction(before, [during, taken, dict(before)], VOICES) == round(expected, 4)
    assert moved_fraction(before, [during], VOICES) == 0.0


def test_the_group_is_settled_only_with_every_partition_owned_once_and_no_worker_idle() -> None:
    quarters = [{0, 4, 8}, {1, 5, 9}, {2, 6, 10}, {3, 7, 11}]
    assert settled(quarters, 12)
    assert not settled([*quarters[:3], set()], 12)  # a worker still joining
    assert not settled([{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, *quarters[1:]], 12)  # overlap
    assert not settled([{0, 4}, *quarters[1:]], 12)  # partition 8 unowned
