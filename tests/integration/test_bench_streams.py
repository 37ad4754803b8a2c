"""The lanes benchmark's Kafka plumbing on the real broker: requests produced to the
interactive lane (keyed by voice), and chunk records read back from tts.audio with the
time their first audio arrived."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import TopicPartition

from bench.harness import Load
from bench.lanefigures import lane_requests
from bench.streams import AudioLog
from consumers.kafka import make_consumer, make_producer
from consumers.settings import Settings
from topics.chunks import chunk_headers
from topics.specs import REQUESTS_INTERACTIVE, topic_names

pytestmark = pytest.mark.integration


async def test_load_produces_to_the_interactive_lane_keyed_by_voice(settings: Settings) -> None:
    names = topic_names(settings.kafka.topic_prefix)
    reqs = lane_requests(4, ["voice-a", "voice-b"], prefix="ia", tag="t", stream=True)
    async with Load(settings, topic=names.requests_interactive) as load:
        await load.burst(reqs)
    assert load.acked == {r.request_id for r in reqs} and not load.failed
    consumer = make_consumer(settings.kafka, enable_auto_commit=False, group_id=None)
    await consumer.start()
    try:
        tps = [TopicPartition(names.requests_interactive, p)
               for p in range(REQUESTS_INTERACTIVE.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        seen: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + 20
        while len(seen) < 4 and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                seen += [(r.key, r.value) for r in records]
    finally:
        await consumer.stop()
    assert sorted(k for k, _ in seen) == [b"voice-a", b"voice-a", b"voice-b", b"voice-b"]
    assert all(b'"stream":true' in v for _, v in seen)


async def test_audio_log_times_the_first_chunk_with_audio(settings: Settings) -> None:
    topic = topic_names(settings.kafka.topic_prefix).audio
    producer = make_producer(settings.kafka)
    await producer.start()
    try:
        async with AudioLog(settings) as log:
            before = time.time()
            for seq, (data, final) in enumerate([(b"\x01\x00" * 2400, False),
                                                 (b"\x02\x00" * 2400, False), (b"", True)]):
                await producer.send_and_wait(
                    topic, data, key=b"req-1",
                    headers=chunk_headers(seq=seq, attempt="att-1", sample_rate=24000,
                                          final=final,
                                          status="succeeded" if final else None))
            await producer.send_and_wait(topic, b"junk", key=b"req-2", headers=[])
            missing = await log.wait_first({"req-1"}, 20)
            for _ in range(400):  # the final record and the junk one, within 20 s
                if log.streams["req-1"].final_at is not None and log.invalid >= 1:
                    break
                await asyncio.sleep(0.05)
            after = time.time()
    finally:
        await producer.stop()
    assert missing == set()
    first = log.first_audio()["req-1"]
    assert before <= first <= after
    seen = log.streams["req-1"]
    assert (seen.chunks, seen.status, seen.attempts) == (3, "succeeded", {"att-1"})
    assert seen.audio_seconds == pytest.approx(0.2)
    assert log.invalid == 1 and "req-2" not in log.streams
    assert await log.wait_first({"never"}, 0.3) == {"never"}  # bounded, no hang
