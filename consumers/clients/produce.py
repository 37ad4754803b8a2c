"""Producer-side commands: `say` (one request, wait, download) and `submit` (JSONL).

Waiting for a result: the result's key (job ID or request ID) fixes its partition, so
`say` assigns just that partition of `tts.results`, seeks to its end *before* producing the
request, then reads until its request_id shows up. `interactive=True` produces to
`tts.requests.interactive`, the lane workers serve first (docs/lanes.md).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import orjson
from aiokafka import TopicPartition

from consumers.kafka import make_consumer, make_producer
from consumers.settings import Settings
from pipeline.voices import voice_topic_key
from topics.events import (
    SynthesisRequest,
    SynthesisResult,
    VoiceRegistration,
    decode_result,
    encode,
)
from topics.partitioning import partition_for
from topics.specs import RESULTS, topic_names


def new_request_id() -> str:
    return f"req-{uuid.uuid4().hex[:16]}"


def request_topic(settings: Settings, *, interactive: bool = False) -> str:
    names = topic_names(settings.kafka.topic_prefix)
    return names.requests_interactive if interactive else names.requests


async def request_and_wait(settings: Settings, requests: list[SynthesisRequest],
                           timeout_s: float = 120.0, *,
                           interactive: bool = False) -> dict[str, SynthesisResult]:
    """Produce requests keyed by voice ID and wait for every result; returns them by ID."""
    names = topic_names(settings.kafka.topic_prefix)
    topic = request_topic(settings, interactive=interactive)
    wanted = {r.request_id for r in requests}
    result_keys = {(r.job.id if r.job else r.request_id) for r in requests}
    partitions = sorted({partition_for(k, RESULTS.partitions) for k in result_keys})
    consumer = make_consumer(settings.kafka, enable_auto_commit=False, group_id=None)
    producer = make_producer(settings.kafka)
    await consumer.start()
    await producer.start()
    try:
        tps = [TopicPartition(names.results, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        for tp in tps:  # resolve the end offsets now, before the requests exist
            await consumer.position(tp)
        for request in requests:
            await producer.send_and_wait(topic, encode(request), key=request.voice_id.encode())
        found: dict[str, SynthesisResult] = {}
        deadline = time.monotonic() + timeout_s
        while wanted - found.keys():
            if time.monotonic() > deadline:
                missing = sorted(wanted - found.keys())
                raise TimeoutError(f"no result within {timeout_s:.0f} s for {missing}; is a "
                                   "worker running (`voicefactory worker`)?")
            batches = await consumer.getmany(timeout_ms=500)
            for records in batches.values():
                for rec in records:
                    result = decode_result(rec.value or b"{}")
                    if result.request_id in wanted:
                        found[result.request_id] = result
        return found
    finally:
        await consumer.stop()
        await producer.stop()


def read_jsonl(path: Path) -> Iterable[SynthesisRequest]:
    from topics.validation import decode_request

    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        obj = orjson.loads(line)
        obj.setdefault("request_id", new_request_id())
        try:
            yield decode_request(orjson.dumps(obj))
        except Exception as exc:
            raise ValueError(f"{path}:{lineno}: {exc}") from None


async def submit(settings: Settings, requests: Iterable[SynthesisRequest], *,
                 interactive: bool = False) -> int:
    topic = request_topic(settings, interactive=interactive)
    producer = make_producer(settings.kafka)
    await producer.start()
    count = 0
    try:
        futures = []
        for request in requests:
            futures.append(await producer.send(topic, encode(request),
                                               key=request.voice_id.encode()))
            count += 1
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return count


async def publish_voice(settings: Settings, event: VoiceRegistration) -> None:
    """The registration event on the compacted `tts.voices` topic, keyed by
    `scoped_id(tenant, voice_id)` (voice IDs are unique within a tenant only)."""
    topic = topic_names(settings.kafka.topic_prefix).voices
    producer = make_producer(settings.kafka)
    await producer.start()
    try:
        await producer.send_and_wait(topic, encode(event),
                                     key=voice_topic_key(event.voice_id, event.tenant))
    finally:
        await producer.stop()


async def publish_voice_tombstone(settings: Settings, voice_id: str, *,
                                  tenant: str | None = None) -> None:
    """A null value for the voice's key: compaction then forgets the voice on `tts.voices`."""
    topic = topic_names(settings.kafka.topic_prefix).voices
    producer = make_producer(settings.kafka)
    await producer.start()
    try:
        await producer.send_and_wait(topic, None, key=voice_topic_key(voice_id, tenant))
    finally:
        await producer.stop()
