from bench.restart import moved_fraction
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
