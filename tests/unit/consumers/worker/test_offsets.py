"""OffsetTracker: what the commit loop may commit, whatever order work finishes in."""

from __future__ import annotations

import random

import pytest
from aiokafka.structs import TopicPartition

from consumers.worker.offsets import OffsetTracker

P0 = TopicPartition("tts.requests", 0)
P1 = TopicPartition("tts.requests", 1)


def fetched(*offsets: int, tp: TopicPartition = P0) -> OffsetTracker:
    tracker = OffsetTracker()
    for offset in offsets:
        tracker.add(tp, offset)
    return tracker


def test_nothing_is_committable_before_anything_is_done() -> None:
    tracker = fetched(0, 1, 2)
    assert tracker.committable() == {}
    # All three are still outstanding: tracked, and the commit point has passed none.
    assert [tracker.add(P0, offset) for offset in (0, 1, 2)] == [False, False, False]


def test_out_of_order_completion_never_commits_past_an_unfinished_offset() -> None:
    tracker = fetched(0, 1, 2, 3)
    tracker.done(P0, 2)
    tracker.done(P0, 1)
    assert tracker.committable() == {}  # 0 is still running
    tracker.done(P0, 0)
    assert tracker.committable() == {P0: 3}  # 3 is still running
    tracker.done(P0, 3)
    assert tracker.committable() == {P0: 4}
    assert [tracker.done(P0, offset) for offset in range(4)] == [False] * 4  # none pending


def test_gaps_between_fetched_offsets_do_not_hold_the_commit_back() -> None:
    tracker = fetched(10, 13, 20)  # 11, 12, 14-19: compacted away or transaction markers
    tracker.done(P0, 10)
    assert tracker.committable() == {P0: 11}
    tracker.done(P0, 20)
    assert tracker.committable() == {P0: 11}
    tracker.done(P0, 13)
    assert tracker.committable() == {P0: 21}


def test_only_partitions_whose_point_moved_are_reported_again() -> None:
    tracker = OffsetTracker()
    for offset in range(3):
        tracker.add(P0, offset)
        tracker.add(P1, offset)
    tracker.done(P0, 0)
    tracker.done(P1, 0)
    assert tracker.committable() == {P0: 1, P1: 1}
    tracker.mark_committed({P0: 1, P1: 1})
    assert tracker.committable() == {}
    tracker.done(P1, 1)
    assert tracker.committable() == {P1: 2}


def test_a_stale_mark_committed_does_not_move_the_point_back() -> None:
    tracker = fetched(0, 1)
    tracker.done(P0, 0)
    tracker.done(P0, 1)
    tracker.mark_committed({P0: 2})
    tracker.mark_committed({P0: 1})  # a slower, older commit finishing late
    assert tracker.committable() == {}


def test_revocation_forgets_the_partition_and_ignores_late_answers() -> None:
    tracker = OffsetTracker()
    tracker.add(P0, 0)
    tracker.add(P0, 1)
    tracker.add(P1, 5)
    tracker.forget([P0])
    assert tracker.done(P0, 0) is False  # in-flight work finishing after the revocation
    assert tracker.committable() == {}
    tracker.mark_committed({P0: 2})  # ignored, not an error
    assert tracker.committed(P0) is None
    assert tracker.committable() == {}
    assert tracker.done(P1, 5) is True  # the other partition keeps its pending offset
    assert tracker.committable() == {P1: 6}
    assert tracker.add(P0, 0) is True  # nothing of P0's old state is left


def test_reassigned_partition_starts_afresh() -> None:
    tracker = fetched(0, 1)
    tracker.done(P0, 0)
    tracker.mark_committed({P0: 1})
    tracker.forget([P0])
    tracker.add(P0, 1)  # the new assignment resumes at the committed offset
    tracker.done(P0, 1)
    assert tracker.committable() == {P0: 2}


def test_duplicates_and_unknown_offsets_change_nothing() -> None:
    tracker = fetched(0, 1)
    assert tracker.add(P0, 1) is False
    assert tracker.done(P0, 7) is False  # never fetched
    assert tracker.done(P0, 1) is True
    assert tracker.done(P0, 1) is False  # twice
    assert tracker.committable() == {}
    assert tracker.done(P0, 0) is True  # the one offset still pending
    assert tracker.add(P0, 0) is False  # redelivered after the point passed it
    assert tracker.committable() == {P0: 2}
    assert [tracker.done(P0, 0), tracker.done(P0, 1)] == [False, False]  # none pending


def test_an_offset_fetched_out_of_order_still_holds_the_point() -> None:
    tracker = fetched(0, 2)
    tracker.done(P0, 0)
    tracker.add(P0, 1)
    tracker.done(P0, 2)
    assert tracker.committable() == {P0: 1}
    tracker.done(P0, 1)
    assert tracker.committable() == {P0: 3}


def test_negative_offsets_are_rejected() -> None:
    with pytest.raises(ValueError, match="offset must be >= 0"):
        OffsetTracker().add(P0, -1)


def test_pending_offsets_follow_every_operation() -> None:
    tracker = OffsetTracker()
    for offset in range(5):
        tracker.add(P0, offset)
    tracker.add(P1, 0)
    tracker.done(P0, 3)
    assert tracker.done(P0, 3) is False  # done already: no longer pending
    tracker.forget([P1, TopicPartition("other", 9)])  # an unknown partition is no error
    assert tracker.done(P1, 0) is False  # forgotten with its partition
    assert [tracker.done(P0, offset) for offset in (0, 1, 2, 4)] == [True] * 4  # still pending
    assert tracker.committable() == {P0: 5}


def test_random_completion_orders_match_a_brute_force_model() -> None:
    rng = random.Random(7)
    for _ in range(50):
        offsets = sorted(rng.sample(range(200), 40))
        tracker = fetched(*offsets)
        finished: set[int] = set()
        for offset in rng.sample(offsets, len(offsets)):
            tracker.done(P0, offset)
            finished.add(offset)
            prefix = 0
            for o in offsets:
                if o not in finished:
                    break
                prefix = o + 1
            expected = {P0: prefix} if prefix else {}
            assert tracker.committable() == expected


def test_many_offsets_are_tracked_quickly() -> None:
    tracker = OffsetTracker()
    n = 100_000
    for offset in range(n):
        tracker.add(P0, offset)
    for offset in reversed(range(n)):  # worst order: the head finishes last
        tracker.done(P0, offset)
    assert tracker.committable() == {P0: n}
    assert tracker.done(P0, 0) is False and tracker.done(P0, n - 1) is False  # none pending


def test_committed_reads_back_the_last_mark_and_forgets_with_the_partition() -> None:
    tracker = fetched(0, 1)
    assert tracker.committed(P0) is None
    tracker.done(P0, 0)
    tracker.mark_committed(tracker.committable())
    assert tracker.committed(P0) == 1
    tracker.forget([P0])
    assert tracker.committed(P0) is None


def test_next_fetch_is_one_past_the_highest_offset_added_until_forgotten() -> None:
    tracker = OffsetTracker()
    assert tracker.next_fetch(P0) is None
    for offset in (4, 2, 3):
        tracker.add(P0, offset)
    assert tracker.next_fetch(P0) == 5
    tracker.done(P0, 4)
    tracker.add(P0, 3)  # a refetch changes nothing
    assert tracker.next_fetch(P0) == 5
    tracker.forget([P0])
    assert tracker.next_fetch(P0) is None
