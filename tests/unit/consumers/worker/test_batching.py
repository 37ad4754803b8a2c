"""VoiceBatcher: size and time release, one voice per batch (several where the engine mixes
voices), fairness, drop and drain."""

from __future__ import annotations

import asyncio
import time
from typing import TypeVar

import pytest

from consumers.worker.batching import BatcherClosed, ShareRule, VoiceBatcher

T = TypeVar("T")


def batcher(max_batch: int = 4, wait_s: float = 0.05, capacity: int = 100) -> VoiceBatcher[int]:
    return VoiceBatcher(max_batch=max_batch, batch_wait_s=wait_s, capacity=capacity)


async def take(b: VoiceBatcher[T]) -> tuple[str, list[T]]:
    """next_batch, failing fast instead of hanging when a batch never comes."""
    return await asyncio.wait_for(b.next_batch(), timeout=1)


async def timed(b: VoiceBatcher[int]) -> tuple[str, list[int], float]:
    started = time.monotonic()
    voice, items = await asyncio.wait_for(b.next_batch(), timeout=1)
    return voice, items, time.monotonic() - started


async def test_a_full_batch_is_released_without_waiting() -> None:
    b = batcher(max_batch=3, wait_s=5)
    for i in range(4):
        b.put("alice", i)
    voice, items, took = await timed(b)
    assert (voice, items) == ("alice", [0, 1, 2])
    assert took < 0.05
    assert b.qsize() == 1


async def test_a_partial_batch_is_released_after_the_wait() -> None:
    b = batcher(max_batch=8, wait_s=0.08)
    b.put("alice", 1)
    b.put("alice", 2)
    voice, items, took = await timed(b)
    assert (voice, items) == ("alice", [1, 2])
    assert 0.07 <= took < 0.3


async def test_an_item_put_while_waiting_joins_the_batch_and_a_full_one_wakes_it() -> None:
    b = batcher(max_batch=2, wait_s=5)
    waiter = asyncio.create_task(timed(b))
    await asyncio.sleep(0.01)
    b.put("alice", 1)
    await asyncio.sleep(0.01)
    assert not waiter.done()
    b.put("alice", 2)
    voice, items, took = await waiter
    assert (voice, items) == ("alice", [1, 2])
    assert took < 0.5


async def test_max_batch_one_adds_no_wait() -> None:
    b = batcher(max_batch=1, wait_s=5)
    waiter = asyncio.create_task(timed(b))
    await asyncio.sleep(0)
    b.put("alice", 1)
    voice, items, took = await waiter
    assert (voice, items) == ("alice", [1])
    assert took < 0.05


async def test_a_batch_holds_one_voice_only() -> None:
    b = batcher(max_batch=4, wait_s=0)
    for i, voice in enumerate(["alice", "bob", "alice", "bob", "carol"]):
        b.put(voice, i)
    got = [await take(b) for _ in range(3)]
    assert got == [("alice", [0, 2]), ("bob", [1, 3]), ("carol", [4])]
    assert b.qsize() == 0


async def test_a_hot_voice_does_not_starve_a_quiet_one() -> None:
    b = batcher(max_batch=2, wait_s=0.03)
    for i in range(4):
        b.put("hot", i)
    b.put("quiet", 100)
    await asyncio.sleep(0.04)  # the quiet voice's wait runs out
    for i in range(4, 10):
        b.put("hot", i)  # the hot voice keeps filling batches
    order = [(await take(b))[0] for _ in range(3)]
    # quiet's item is older than hot's third batch, so it goes before it
    assert order == ["hot", "hot", "quiet"]


async def test_among_ready_voices_the_oldest_goes_first() -> None:
    b = batcher(max_batch=2, wait_s=0)
    b.put("late", 1)
    b.put("early", 2)  # early's head is newer, but fill 'late' only after it
    b.put("late", 3)
    assert (await take(b)) == ("late", [1, 3])
    assert (await take(b)) == ("early", [2])


async def test_full_reflects_capacity_and_put_never_drops() -> None:
    b = batcher(max_batch=2, wait_s=0, capacity=3)
    for i in range(2):
        b.put("alice", i)
    assert not b.full
    b.put("alice", 2)
    assert b.full
    b.put("alice", 3)  # over capacity: kept; the caller pauses its partitions
    assert b.qsize() == 4
    got = [(await take(b))[1] for _ in range(2)]
    assert got == [[0, 1], [2, 3]]
    assert not b.full


async def test_drop_removes_and_returns_matching_items_in_arrival_order() -> None:
    b = batcher(max_batch=10, wait_s=0)
    for i, voice in enumerate(["a", "b", "a", "b", "c"]):
        b.put(voice, i)
    assert b.drop(lambda item: item in {0, 1, 3, 4}) == [0, 1, 3, 4]
    assert b.qsize() == 1
    assert (await take(b)) == ("a", [2])
    assert b.drop(lambda item: True) == []


async def test_close_hands_out_what_is_queued_then_raises() -> None:
    b = batcher(max_batch=4, wait_s=10)
    b.put("alice", 1)
    b.put("bob", 2)
    b.close()
    first = await asyncio.wait_for(b.next_batch(), timeout=0.5)  # partial: no 10-s wait
    second = await asyncio.wait_for(b.next_batch(), timeout=0.5)
    assert sorted([first, second]) == [("alice", [1]), ("bob", [2])]
    with pytest.raises(BatcherClosed):
        await take(b)


async def test_close_wakes_every_waiting_dispatcher() -> None:
    b = batcher()
    waiters = [asyncio.create_task(b.next_batch()) for _ in range(3)]
    await asyncio.sleep(0.01)
    b.close()
    results = await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), 0.5)
    assert all(isinstance(r, BatcherClosed) for r in results)


async def test_concurrent_dispatchers_each_get_distinct_batches() -> None:
    b = batcher(max_batch=2, wait_s=0.02)
    waiters = [asyncio.create_task(b.next_batch()) for _ in range(3)]
    await asyncio.sleep(0)
    for i in range(6):
        b.put(f"v{i % 3}", i)
    results = await asyncio.wait_for(asyncio.gather(*waiters), 0.5)
    assert sorted(results) == [("v0", [0, 3]), ("v1", [1, 4]), ("v2", [2, 5])]


async def test_a_cancelled_wait_loses_nothing() -> None:
    b = batcher(max_batch=2, wait_s=5)
    waiter = asyncio.create_task(b.next_batch())
    await asyncio.sleep(0.01)
    b.put("alice", 1)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    b.put("alice", 2)
    assert (await asyncio.wait_for(b.next_batch(), 0.5)) == ("alice", [1, 2])


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_batch": 0, "batch_wait_s": 0.0, "capacity": 1}, "max_batch"),
    ({"max_batch": 1, "batch_wait_s": -0.1, "capacity": 1}, "batch_wait_s"),
    ({"max_batch": 1, "batch_wait_s": float("inf"), "capacity": 1}, "batch_wait_s"),
    ({"max_batch": 1, "batch_wait_s": 0.0, "capacity": 0}, "capacity"),
])
def test_bad_settings_are_refused_with_a_clear_message(kwargs: dict[str, float],
                                                       message: str) -> None:
    with pytest.raises(ValueError, match=message):
        VoiceBatcher[int](**kwargs)  # type: ignore[arg-type]


async def test_an_idle_engine_takes_a_partial_batch_at_once_a_busy_one_waits() -> None:
    busy = [False]
    b: VoiceBatcher[int] = VoiceBatcher(max_batch=8, batch_wait_s=0.2, capacity=100,
                                        idle=lambda: not busy[0])
    b.put("alice", 1)
    b.put("alice", 2)
    voice, items, took = await timed(b)
    assert (voice, items) == ("alice", [1, 2]) and took < 0.05
    busy[0] = True
    b.put("bob", 3)
    voice, items, took = await timed(b)
    assert (voice, items) == ("bob", [3]) and took >= 0.19  # the window, as before


# -- lanes ------------------------------------------------------------------------------------

async def test_interactive_goes_first_even_behind_an_older_batch_backlog() -> None:
    b = batcher(max_batch=2, wait_s=0)
    for i in range(6):
        b.put(f"v{i}", i)  # batch lane by default
    b.put("v9", 100, "interactive")
    assert (b.qsize("batch"), b.qsize("interactive"), b.qsize()) == (6, 1, 7)
    assert await take(b) == ("v9", [100])
    assert await take(b) == ("v0", [0])  # then the backlog, oldest first


async def test_a_voice_in_both_lanes_gets_separate_batches() -> None:
    b = batcher(max_batch=4, wait_s=0)
    b.put("alice", 1)
    b.put("alice", 2, "interactive")
    b.put("alice", 3)
    assert await take(b) == ("alice", [2])
    assert await take(b) == ("alice", [1, 3])


async def test_batch_keeps_its_minimum_share_while_both_lanes_wait() -> None:
    b: VoiceBatcher[str] = VoiceBatcher(max_batch=1, batch_wait_s=0, capacity=1000,
                                        batch_share=0.1)
    for i in range(30):
        b.put("a", f"i{i}", "interactive")
        b.put("b", f"b{i}")
    order = [(await take(b))[1][0][0] for _ in range(30)]
    assert order.count("b") == 3  # 1 in 10 of the contested turns
    assert order[9] == order[19] == order[29] == "b"


async def test_a_share_of_zero_is_strict_priority_and_batch_runs_once_interactive_is_gone() -> None:
    b: VoiceBatcher[str] = VoiceBatcher(max_batch=1, batch_wait_s=0, capacity=1000,
                                        batch_share=0.0)
    for i in range(3):
        b.put("b", f"b{i}")
    for i in range(20):
        b.put("a", f"i{i}", "interactive")
    order = [(await take(b))[1][0] for _ in range(23)]
    assert order == [f"i{i}" for i in range(20)] + ["b0", "b1", "b2"]


def test_share_rule_gives_batch_the_nth_contested_turn() -> None:
    rule = ShareRule(0.25)
    assert [rule.contested() for _ in range(8)] == ["interactive"] * 3 + ["batch"] + \
        ["interactive"] * 3 + ["batch"]
    assert [ShareRule(1.0).contested() for _ in range(2)] == ["batch", "batch"]
    with pytest.raises(ValueError, match="batch_share"):
        ShareRule(1.5)


async def test_drop_counts_each_lane_and_an_unknown_lane_is_refused() -> None:
    b = batcher()
    b.put("alice", 1, "interactive")
    b.put("alice", 2)
    b.put("bob", 3, "interactive")
    assert b.drop(lambda item: item != 2) == [1, 3]
    assert (b.qsize("interactive"), b.qsize("batch")) == (0, 1)
    with pytest.raises(ValueError, match="lane"):
        b.put("alice", 4, "urgent")  # type: ignore[arg-type]


async def test_a_dispatcher_of_one_lane_takes_only_that_lane_s_work() -> None:
    b = batcher(max_batch=2, wait_s=0)
    b.put("alice", 1)
    only = asyncio.create_task(b.next_batch("interactive"))
    await asyncio.sleep(0.02)
    assert not only.done()  # batch work is there, but not for this dispatcher
    b.put("bob", 2, "interactive")
    assert await asyncio.wait_for(only, 1) == ("bob", [2])
    assert await take(b) == ("alice", [1])
    b.close()
    with pytest.raises(BatcherClosed):
        await asyncio.wait_for(b.next_batch("interactive"), 1)


def mixing(max_batch: int = 4) -> VoiceBatcher[int]:
    """A batcher for an engine that mixes voices: every queue but `stream:...` may share."""
    return VoiceBatcher(max_batch=max_batch, batch_wait_s=5, capacity=100,
                        idle=lambda: True, mixable=lambda key: not key.startswith("stream:"))


async def test_mixing_tops_a_batch_up_from_other_voices_oldest_head_first() -> None:
    b = mixing(max_batch=4)
    b.put("alice", 1)
    b.put("bob", 2)
    b.put("carol", 3)
    b.put("bob", 4)
    b.put("dave", 5)
    voice, items = await take(b)
    # alice's queue is picked (oldest head); bob's (head 2) then carol's (head 3) fill it.
    assert (voice, items) == ("alice", [1, 2, 4, 3])
    assert b.qsize() == 1
    assert await take(b) == ("dave", [5])


async def test_mixing_never_takes_a_streamed_request_or_another_lane_s_items() -> None:
    b = mixing(max_batch=8)
    b.put("alice", 1)
    b.put("stream:x", 2)
    b.put("bob", 3, lane="interactive")
    b.put("carol", 4)
    assert await take(b) == ("bob", [3])  # interactive first, and alone in its lane
    assert await take(b) == ("alice", [1, 4])
    assert await take(b) == ("stream:x", [2])  # a streamed request goes alone
    assert b.qsize() == 0


async def test_without_mixable_a_batch_stays_one_voice_even_with_room() -> None:
    b = VoiceBatcher[int](max_batch=8, batch_wait_s=5, capacity=100, idle=lambda: True)
    b.put("alice", 1)
    b.put("bob", 2)
    assert await take(b) == ("alice", [1])
    assert await take(b) == ("bob", [2])


async def test_mixing_batch_lane_waits_for_the_device_not_the_timer_then_goes_together() -> None:
    device_free = False
    b = VoiceBatcher[int](max_batch=3, batch_wait_s=0.01, capacity=100,
                          idle=lambda: device_free, mixable=lambda key: True)
    b.put("alice", 1)
    b.put("bob", 2)
    waiter = asyncio.create_task(b.next_batch())
    await asyncio.sleep(0.1)  # ten times the batch wait: still held, for company
    assert not waiter.done()
    device_free = True
    b.poke()  # the worker's gate calls this when a slot frees
    assert await asyncio.wait_for(waiter, 1) == ("alice", [1, 2])
    device_free = False
    for i, voice in enumerate(["carol", "dave", "erin"]):  # a full batch goes at once
        b.put(voice, 3 + i)
    assert await take(b) == ("carol", [3, 4, 5])
    b.put("frank", 6, lane="interactive")  # callers keep the timer
    assert await take(b) == ("frank", [6])
