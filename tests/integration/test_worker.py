"""The walking skeleton end to end: requests on Kafka -> WAV objects in S3 -> results."""

from __future__ import annotations

import asyncio
import time
import uuid

import msgspec
import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from consumers.clients.produce import request_and_wait
from consumers.settings import Settings
from consumers.wiring import make_store
from pipeline.audio import decode, speech_seconds
from pipeline.engines.base import Profile, SynthesisItem, Synthesized
from pipeline.fingerprint import Fingerprint
from tests.integration.conftest import RunningWorker
from topics.events import SynthesisRequest, SynthesisResult, decode_result, encode
from topics.partitioning import partition_for
from topics.specs import topic_names

pytestmark = pytest.mark.integration

LINES = [("zh", "欢迎来到语音工厂。"), ("yue", "早晨，今日天氣好好。"),
         ("en", "Hello from the voice factory.")]


def _request(voice: str, text: str, language: str | None = None) -> SynthesisRequest:
    return SynthesisRequest(request_id=f"it-{uuid.uuid4().hex[:12]}", voice_id=voice, text=text,
                            language=language)


async def _read_all(settings: Settings, topic: str, timeout_s: float = 5.0) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        if not partitions:
            await consumer._client.force_metadata_update()
            partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        values: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            positions = [await consumer.position(tp) for tp in tps]
            if all(pos >= ends[tp] for pos, tp in zip(positions, tps, strict=True)):
                break
            for records in (await consumer.getmany(timeout_ms=200)).values():
                values.extend(r.value or b"" for r in records)
        return values
    finally:
        await consumer.stop()


async def test_three_languages_become_audible_wav_objects(
        settings: Settings, voice: str, worker: RunningWorker) -> None:
    requests = [_request(voice, text, lang) for lang, text in LINES]
    results = await request_and_wait(settings, requests, timeout_s=60)
    store = make_store(settings.store)
    for request in requests:
        result = results[request.request_id]
        assert result.status == "succeeded", result.error
        assert result.audio is not None
        assert result.audio.key.startswith("audio/") and result.audio.key.endswith(
            f"/{request.request_id}.wav")
        data = store.get(result.audio.key)
        assert data is not None and data[:4] == b"RIFF"
        audio = decode(data)
        assert audio.duration_s > 0.5
        assert speech_seconds(audio) > 0.5
        assert result.audio.bytes == len(data)


async def test_key_lands_on_the_murmur2_partition(settings: Settings) -> None:
    names = topic_names(settings.kafka.topic_prefix)
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap)
    await producer.start()
    try:
        for voice_id in ("narrator-1", "alice", "客服-01".encode().hex(), "v:42"):
            meta = await producer.send_and_wait(names.requests, b"{}", key=voice_id.encode())
            assert meta.partition == partition_for(voice_id, 12)
    finally:
        await producer.stop()


async def test_restarted_worker_does_not_reprocess_committed_work(
        settings: Settings, voice: str) -> None:
    first = [_request(voice, "First batch line one.", "en"),
             _request(voice, "First batch line two.", "en")]
    async with RunningWorker(settings) as running:
        await request_and_wait(settings, first, timeout_s=60)
    assert running.worker.processed == 2
    second = [_request(voice, "After the restart.", "en")]
    async with RunningWorker(settings) as restarted:
        await request_and_wait(settings, second, timeout_s=60)
        await asyncio.sleep(1.0)  # room for any wrongly redelivered record to show up
    assert restarted.worker.processed == 1
    results = [decode_result(v) for v in await _read_all(settings,
                                                        topic_names(settings.kafka.topic_prefix).results)]
    assert sorted(r.request_id for r in results) == sorted(r.request_id for r in first + second)


async def test_bad_input_is_answered_and_never_blocks(settings: Settings, voice: str,
                                                      worker: RunningWorker) -> None:
    names = topic_names(settings.kafka.topic_prefix)
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap)
    await producer.start()
    try:
        # All on one partition (same key), poison first: the good one must still be served.
        key = voice.encode()
        await producer.send_and_wait(names.requests, b"\xff not json", key=key)
        await producer.send_and_wait(names.requests, orjson.dumps(
            {"request_id": "bad-1", "voice_id": voice, "text": "x" * 2417}), key=key)
        await producer.send_and_wait(names.requests, orjson.dumps(
            {"request_id": "bad-2", "voice_id": "nobody", "text": "hi"}), key=key)
    finally:
        await producer.stop()
    good = _request(voice, "Still served after the poison.", "en")
    results = await request_and_wait(settings, [good], timeout_s=60)
    assert results[good.request_id].status == "succeeded"
    await asyncio.sleep(0.5)
    answered = {r.request_id: r for r in (decode_result(v) for v in
                                         await _read_all(settings, names.results))}
    assert answered["bad-1"].status == "rejected"
    assert answered["bad-1"].error is not None
    assert answered["bad-1"].error.code == "text_too_long"
    assert "2,417 characters" in answered["bad-1"].error.message
    assert answered["bad-2"].error is not None
    assert answered["bad-2"].error.code == "voice_not_found"
    dlq = [orjson.loads(v) for v in await _read_all(settings, names.dlq)]
    assert len(dlq) == 1 and dlq[0]["reason"].startswith("invalid_json")
    assert dlq[0]["offset"] == 0


async def test_redelivered_request_is_answered_from_the_stored_object(
        settings: Settings, voice: str, worker: RunningWorker) -> None:
    request = _request(voice, "Say it once, store it once.", "en")
    first = (await request_and_wait(settings, [request], timeout_s=60))[request.request_id]
    again = (await request_and_wait(settings, [request], timeout_s=60))[request.request_id]
    assert first.audio is not None and again.audio is not None
    assert again.audio.key == first.audio.key
    assert again.audio.sha256 == first.audio.sha256
    assert "synthesis" in first.timings_ms
    assert "synthesis" not in again.timings_ms  # answered without running the engine


async def test_a_reused_request_id_is_rejected_and_an_identical_resend_answered_from_the_object(
        settings: Settings, voice: str, worker: RunningWorker) -> None:
    request = _request(voice, "The first text, stored once.", "en")
    rid = request.request_id
    first = (await request_and_wait(settings, [request], timeout_s=60))[rid]
    assert first.status == "succeeded" and first.audio is not None
    store = make_store(settings.store)
    stored, info = store.get(first.audio.key), store.stat(first.audio.key)
    assert info is not None and info.metadata["fingerprint"] == Fingerprint.of(request).value

    other = msgspec.structs.replace(request, text="A different text under the same ID.")
    reused = (await request_and_wait(settings, [other], timeout_s=60))[rid]
    assert reused.status == "rejected" and reused.audio is None
    assert reused.error is not None
    assert (reused.error.code, reused.error.retryable) == ("request_id_reused", False)
    assert "differs in text" in reused.error.message
    assert "synthesis" not in reused.timings_ms
    assert store.get(first.audio.key) == stored  # the first object is untouched

    # Delivery and echo fields are not the request: an identical re-send with other
    # metadata is answered from the object, without the engine, and echoes its own metadata.
    resend = msgspec.structs.replace(request, metadata={"resent": True})
    again = (await request_and_wait(settings, [resend], timeout_s=60))[rid]
    assert again.status == "succeeded" and again.audio is not None
    assert (again.audio.key, again.audio.sha256) == (first.audio.key, first.audio.sha256)
    assert "synthesis" not in again.timings_ms
    assert again.metadata == {"resent": True}


async def test_one_request_twice_in_a_batch_is_synthesized_and_stored_once(
        settings: Settings, voice: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.integration.workers import produce, wait_for_answers

    s = settings.with_overrides(engine={"name": "bench"})
    tag = uuid.uuid4().hex[:8]
    twice = SynthesisRequest(request_id=f"twice-{tag}", voice_id=voice, language="en",
                             text="Said twice in one batch.")
    copy = msgspec.structs.replace(twice, metadata={"copy": True})
    clash = SynthesisRequest(request_id=f"clash-{tag}", voice_id=voice, language="en",
                             text="The first text wins.")
    loser = msgspec.structs.replace(clash, text="The second text is refused.")
    # Produced before the worker starts: one fetch, one voice, one batch.
    await produce(s, [twice, copy, clash, loser])
    async with RunningWorker(s) as running:
        calls: list[list[str]] = []
        puts: list[str] = []
        engine, store = running.runtime.engine, running.runtime.store
        real_synthesize, real_put_new = engine.synthesize, store.put_new

        def synthesize(profile: Profile, batch: list[SynthesisItem]) -> list[Synthesized]:
            calls.append([item.text for item in batch])
            return real_synthesize(profile, batch)

        def put_new(key: str, data: bytes, content_type: str,
                    metadata: dict[str, str] | None = None) -> bool:
            puts.append(key)
            return real_put_new(key, data, content_type, metadata)

        monkeypatch.setattr(engine, "synthesize", synthesize)
        monkeypatch.setattr(store, "put_new", put_new)
        results = await wait_for_answers(s, {twice.request_id, clash.request_id}, 60)
        await asyncio.sleep(1.0)  # room for a late second answer
        results = await wait_for_answers(s, {twice.request_id, clash.request_id}, 60)
    by_id: dict[str, list[SynthesisResult]] = {}
    for r in results:
        by_id.setdefault(r.request_id, []).append(r)
    texts = [text for call in calls for text in call]
    assert len(calls) == 1, calls  # one engine call for the whole batch
    assert texts.count("Said twice in one batch.") == 1
    assert "The second text is refused." not in texts
    both = by_id[twice.request_id]
    assert [r.status for r in both] == ["succeeded", "succeeded"]  # each record answered
    assert len({(r.audio.key, r.audio.sha256) for r in both if r.audio}) == 1
    assert sorted(str(r.metadata) for r in both) == sorted(["None", str({"copy": True})])
    refused, won = sorted(by_id[clash.request_id], key=lambda r: r.status)
    assert (refused.status, won.status) == ("rejected", "succeeded")
    assert refused.error is not None and refused.error.code == "request_id_reused"
    assert both[0].audio is not None and won.audio is not None
    assert sorted(puts) == sorted([both[0].audio.key, won.audio.key])  # one upload each
    kept = store.stat(won.audio.key)
    assert kept is not None and kept.metadata["fingerprint"] == Fingerprint.of(clash).value


async def test_one_id_two_texts_back_to_back_one_succeeds_one_is_rejected(
        settings: Settings, voice: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a fuzz run found (both answered `succeeded`, the object overwritten): two texts
    under one ID produced back to back on a running worker meet in one batch, in two batches
    at once (the conditional put decides) or one after the other (the stored object does).
    Whichever: one `succeeded`, whose request the object's fingerprint names, one rejected."""
    from tests.integration.workers import wait_for_answers

    # 300 ms an engine call: the second record arrives while the first is in the engine, and
    # a free slot (max_inflight 2) takes it at once, so the two race for the put.
    monkeypatch.setenv("VF_BENCH_BASE_MS", "300")
    s = settings.with_overrides(engine={"name": "bench"})
    tag = uuid.uuid4().hex[:8]
    pairs = [(SynthesisRequest(request_id=f"pair-{tag}-{i}", voice_id=voice, language="en",
                               text=f"First text {i}.", metadata={"n": 1}),
              SynthesisRequest(request_id=f"pair-{tag}-{i}", voice_id=voice, language="en",
                               text=f"Second text {i}.", metadata={"n": 2}))
             for i in range(6)]
    async with RunningWorker(s) as running:
        store = running.runtime.store
        warm = SynthesisRequest(request_id=f"warm-{tag}", voice_id=voice, text="Warm up.")
        await request_and_wait(s, [warm], timeout_s=60)  # the worker has its partitions
        producer = AIOKafkaProducer(bootstrap_servers=s.kafka.bootstrap, linger_ms=0)
        await producer.start()
        try:
            topic = topic_names(s.kafka.topic_prefix).requests
            for i, pair in enumerate(pairs):
                for request in pair:
                    await producer.send_and_wait(topic, encode(request), key=voice.encode())
                await asyncio.sleep(0.05 * (i % 3))  # vary the timing
        finally:
            await producer.stop()
        # Two records per ID: wait for both answers, not just the first of each.
        results = await wait_for_answers(s, {a.request_id for a, _ in pairs}, 60, each=2)
    for first, second in pairs:
        mine = [r for r in results if r.request_id == first.request_id]
        assert sorted(r.status for r in mine) == ["rejected", "succeeded"], mine  # one each
        got = {r.metadata["n"]: r for r in mine if r.metadata is not None}
        winner = next(n for n, r in got.items() if r.status == "succeeded")
        loser = got[3 - winner]
        assert loser.error is not None and loser.error.code == "request_id_reused"
        audio = got[winner].audio
        assert audio is not None
        info = store.stat(audio.key)
        assert info is not None
        made_by = first if winner == 1 else second
        assert info.metadata["fingerprint"] == Fingerprint.of(made_by).value
        assert info.metadata["sha256"] == audio.sha256
