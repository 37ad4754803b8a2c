"""ReplyStream ordering (restarts, duplicates, final status) and the router's dispatch."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from consumers.gateway.replies import NoReplyPartition, Piece, ReplyRouter, ReplyStream
from consumers.settings import KafkaSettings
from topics.chunks import AudioChunk, chunk_headers


def chunk(seq: int, data: bytes, *, attempt: str = "a", final: bool = False,
          status: str | None = None, error: str | None = None) -> AudioChunk:
    return AudioChunk("r1", seq, attempt, 16000, "pcm_s16le", final, data, status, error)


async def collect(chunks: list[AudioChunk], timeout_s: float = 2.0) -> tuple[bytes, ReplyStream]:
    queue: asyncio.Queue[AudioChunk] = asyncio.Queue()
    for c in chunks:
        queue.put_nowait(c)
    stream = ReplyStream("r1", queue, timeout_s)
    data = b"".join([p.pcm async for p in stream.pieces()])
    return data, stream


async def test_chunks_in_order_then_the_final_status() -> None:
    data, stream = await collect([chunk(0, b"ab"), chunk(1, b"cd"),
                                  chunk(2, b"", final=True, status="succeeded")])
    assert data == b"abcd" and stream.status == "succeeded" and stream.restarts == 0


async def test_duplicates_are_dropped() -> None:
    data, _ = await collect([chunk(0, b"ab"), chunk(0, b"ab"), chunk(1, b"cd", final=True,
                                                                     status="succeeded")])
    assert data == b"abcd"


async def test_a_restart_continues_after_what_was_already_sent() -> None:
    data, stream = await collect([chunk(0, b"ab"), chunk(1, b"cd"),
                                  chunk(0, b"ABC", attempt="b"),
                                  chunk(1, b"DEF", attempt="b", final=True,
                                        status="succeeded")])
    assert data == b"abcdEF" and stream.restarts == 1


async def test_a_failed_final_record_carries_its_error() -> None:
    data, stream = await collect([chunk(0, b"", final=True, status="failed",
                                        error="engine_error")])
    assert data == b"" and (stream.status, stream.error) == ("failed", "engine_error")


async def test_no_final_record_times_out() -> None:
    with pytest.raises(TimeoutError, match="no final chunk for r1"):
        await collect([chunk(0, b"ab")], timeout_s=0.2)


async def test_a_record_past_a_hole_waits_for_the_hole_and_asks_for_a_repair() -> None:
    gaps: list[str] = []
    queue: asyncio.Queue[AudioChunk] = asyncio.Queue()
    stream = ReplyStream("r1", queue, 2.0, on_gap=lambda: gaps.append("r1"))
    for c in [chunk(0, b"ab"), chunk(2, b"ef"), chunk(3, b"", final=True, status="succeeded")]:
        queue.put_nowait(c)
    pieces = stream.pieces()
    assert (await anext(pieces)).pcm == b"ab"
    async def next_piece() -> Piece:
        return await anext(pieces)

    later = asyncio.create_task(next_piece())
    await asyncio.sleep(0.05)
    assert not later.done() and stream.status is None  # the final waits behind the hole
    assert gaps == ["r1"]
    queue.put_nowait(chunk(1, b"cd"))  # the repair's re-read delivers what was missed
    assert (await later).pcm == b"cd"
    assert b"".join([p.pcm async for p in pieces]) == b"ef"
    assert stream.status == "succeeded" and gaps == ["r1"]


async def test_a_final_record_never_ends_a_stream_with_a_hole() -> None:
    with pytest.raises(TimeoutError, match=r"held 1 records past seq 0"):
        await collect([chunk(1, b"", final=True, status="succeeded")], timeout_s=0.2)


async def test_late_records_of_a_replaced_attempt_are_dropped() -> None:
    data, stream = await collect([chunk(0, b"ab"), chunk(0, b"AB", attempt="b"),
                                  chunk(1, b"cd"), chunk(1, b"CD", attempt="b"),
                                  chunk(2, b"", final=True, status="succeeded"),
                                  chunk(2, b"", attempt="b", final=True, status="succeeded")])
    assert data == b"abCD" and stream.restarts == 1 and stream.status == "succeeded"


async def test_an_attempt_with_no_audio_does_not_replace_one_in_progress() -> None:
    data, stream = await collect([chunk(0, b"ab"),
                                  chunk(0, b"", attempt="b", final=True, status="succeeded"),
                                  chunk(1, b"cd"),
                                  chunk(2, b"", final=True, status="succeeded")])
    assert data == b"abcd" and stream.restarts == 0 and stream.status == "succeeded"


def record(key: bytes | None, value: bytes, headers: list[tuple[str, bytes]]) -> object:
    return SimpleNamespace(key=key, value=value, headers=headers, partition=3, offset=7)


def test_the_router_hands_records_only_to_requests_it_waits_for() -> None:
    router = ReplyRouter(KafkaSettings(), "tts.audio", group_id="g")
    with pytest.raises(NoReplyPartition):
        router.register(["r1"])
    router._ready = [3, 5]  # as after an assignment whose positions were resolved
    assert [router.register(["r1"]), router.register(["r2", "r3"])] == [3, 5]
    headers = chunk_headers(seq=0, attempt="a", sample_rate=16000, final=False)
    router._dispatch([record(b"r1", b"pcm", headers), record(b"other", b"x", headers),
                      record(b"r2", b"bad", []), record(None, b"", headers)])
    assert router.queue("r1").get_nowait().data == b"pcm"
    assert router.queue("r2").empty()  # a record without chunk headers is skipped
    router.unregister(["r1", "r2", "r3"])
    assert router.waiting() == 0
