"""Streamed requests on the real stack: chunk records on tts.audio before the result, the
stored object made of exactly those chunks, the reply partition, and `say --stream`."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import soundfile as sf
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from consumers.settings import Settings
from consumers.wiring import make_store
from pipeline.audio import decode, speech_seconds
from tests.integration.conftest import RunningWorker
from tests.integration.test_worker_faults import _wait_log
from tests.integration.workers import REPO, start_worker, wait_for_answers, worker_env
from topics.chunks import REPLY_PARTITION, AudioChunk, read_chunk
from topics.events import SynthesisRequest, SynthesisResult, decode_result, encode
from topics.partitioning import partition_for
from topics.specs import AUDIO, topic_names

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TEXT = "Streaming starts with the first sentence. Then a second one follows. And a third."


async def read_records(settings: Settings, topic: str) -> list[Any]:
    """Every record of `topic` now, in partition and offset order."""
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        tps = [TopicPartition(topic, p)
               for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[Any] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(
                [await consumer.position(tp) < ends[tp] for tp in tps]):
            for records in (await consumer.getmany(timeout_ms=200)).values():
                out.extend(records)
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        await consumer.stop()


async def stream_request(settings: Settings, request: SynthesisRequest,
                         headers: list[tuple[str, bytes]] | None = None,
                         timeout_s: float = 60) -> tuple[list[Any], SynthesisResult, Any]:
    """Produce a streamed request, wait for its result; (its chunk records, the result,
    the result's record)."""
    names = topic_names(settings.kafka.topic_prefix)
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(names.requests, encode(request),
                                     key=request.voice_id.encode(), headers=headers or [])
    finally:
        await producer.stop()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        results = [r for r in await read_records(settings, names.results)
                   if decode_result(r.value).request_id == request.request_id]
        if results:
            chunks = [r for r in await read_records(settings, names.audio)
                      if r.key == request.request_id.encode()]
            return chunks, decode_result(results[0].value), results[0]
        await asyncio.sleep(0.3)
    raise AssertionError(f"no result for {request.request_id}")


def chunks_of(records: list[Any]) -> list[AudioChunk]:
    return [read_chunk(r.key, r.value, r.headers) for r in records]


def stored_pcm(settings: Settings, result: SynthesisResult) -> tuple[np.ndarray, int]:
    assert result.audio is not None
    data = make_store(settings.store).get(result.audio.key)
    assert data is not None
    pcm, rate = sf.read(io.BytesIO(data), dtype="int16")
    return pcm, int(rate)


def streamed(voice: str, **fields: Any) -> SynthesisRequest:
    values: dict[str, Any] = {"request_id": f"st-{uuid.uuid4().hex[:10]}", "voice_id": voice,
                              "text": TEXT, "language": "en", "stream": True}
    values.update(fields)
    return SynthesisRequest(**values)


async def test_a_streamed_request_gets_its_chunks_then_its_result(
        settings: Settings, voice: str, worker: RunningWorker) -> None:
    request = streamed(voice)
    records, result, result_record = await stream_request(settings, request)
    assert result.status == "succeeded", result.error
    chunks = chunks_of(records)
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    assert len(chunks) >= 4  # espeak: one chunk a sentence, the gaps between them
    assert [c.final for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert chunks[-1].status == "succeeded" and chunks[-1].data == b""
    assert len({c.attempt for c in chunks}) == 1
    # All on the partition the key hashes to, written before the result.
    assert {r.partition for r in records} == {partition_for(request.request_id,
                                                            AUDIO.partitions)}
    assert records[-1].timestamp <= result_record.timestamp
    pcm, rate = stored_pcm(settings, result)
    assert {c.sample_rate for c in chunks[:-1]} == {rate}
    assert np.array_equal(np.frombuffer(b"".join(c.data for c in chunks), "<i2"), pcm)
    assert result.timings_ms["first_chunk"] <= result.timings_ms["total"]
    metrics = worker.runtime.metrics.render()[0].decode()
    assert 'vf_first_chunk_seconds_count{lane="batch",since="consumed"} 1.0' in metrics
    assert f'vf_audio_chunks_total{{lane="batch"}} {len(chunks) - 1}.0' in metrics


async def test_the_reply_partition_is_honoured_and_bench_windows_are_chunks(
        settings: Settings, voice: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_BENCH_CHUNK_SECONDS", "0.25")
    monkeypatch.setenv("VF_BENCH_FIRST_CHUNK_MS", "50")
    monkeypatch.setenv("VF_BENCH_PER_AUDIO_SECOND_MS", "100")
    s = settings.with_overrides(engine={"name": "bench"})
    request = streamed(voice, format="flac", sample_rate=16000)
    wanted = (partition_for(request.request_id, AUDIO.partitions) + 5) % AUDIO.partitions
    async with RunningWorker(s):
        records, result, _ = await stream_request(s, request,
                                                  [(REPLY_PARTITION, str(wanted).encode())])
    assert result.status == "succeeded", result.error
    assert {r.partition for r in records} == {wanted}
    chunks = chunks_of(records)
    assert len(chunks) > 10 and chunks[-1].final and chunks[-1].status == "succeeded"
    assert {c.sample_rate for c in chunks[:-1]} == {16000}
    pcm, rate = stored_pcm(s, result)
    assert rate == 16000
    assert np.array_equal(np.frombuffer(b"".join(c.data for c in chunks), "<i2"), pcm)


async def test_streams_of_one_voice_at_once_stay_apart(
        settings: Settings, voice: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_BENCH_CHUNK_SECONDS", "0.2")
    monkeypatch.setenv("VF_BENCH_PER_AUDIO_SECOND_MS", "100")
    s = settings.with_overrides(engine={"name": "bench"})
    requests = [streamed(voice, text=f"Line {i} of four, streamed at once. " * (i + 1))
                for i in range(4)]
    async with RunningWorker(s) as running:
        answers = await asyncio.gather(*(stream_request(s, r) for r in requests))
        engine = running.runtime.engine
    for request, (records, result, _) in zip(requests, answers, strict=True):
        assert result.status == "succeeded", result.error
        assert result.request_id == request.request_id
        chunks = chunks_of(records)
        assert [c.seq for c in chunks] == list(range(len(chunks))) and chunks[-1].final
        pcm, _ = stored_pcm(s, result)
        assert np.array_equal(np.frombuffer(b"".join(c.data for c in chunks), "<i2"), pcm)
    assert getattr(engine, "max_concurrent_seen", 0) == 2  # max_inflight streams at once


async def test_a_streamed_request_sent_twice_is_streamed_both_times(
        settings: Settings, voice: str) -> None:
    """The same streamed request twice in one fetch (a gateway's failover, a producer's
    retry) shares one queue lane: each copy still goes through the stream path, so every
    attempt that ends `succeeded` carries its audio. Through the batch path the copies got
    final records with no chunks, and a gateway reading one first answered 200 with no
    audio at all."""
    request = streamed(voice)
    names = topic_names(settings.kafka.topic_prefix)
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap, acks="all")
    await producer.start()
    try:
        for _ in range(2):  # both wait in the log before the worker fetches
            await producer.send_and_wait(names.requests, encode(request),
                                         key=request.voice_id.encode())
    finally:
        await producer.stop()
    async with RunningWorker(settings):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            results = [decode_result(r.value) for r in await read_records(settings,
                                                                          names.results)
                       if decode_result(r.value).request_id == request.request_id]
            if len(results) == 2:
                break
            await asyncio.sleep(0.3)
    assert [r.status for r in results] == ["succeeded", "succeeded"]
    chunks = chunks_of([r for r in await read_records(settings, names.audio)
                        if r.key == request.request_id.encode()])
    attempts: dict[str, list[AudioChunk]] = {}
    for c in chunks:
        attempts.setdefault(c.attempt, []).append(c)
    assert len(attempts) == 2
    pcm, _ = stored_pcm(settings, results[0])
    for attempt in attempts.values():  # each: its audio in order, then a succeeded final
        assert [c.seq for c in attempt] == list(range(len(attempt)))
        assert attempt[-1].final and attempt[-1].status == "succeeded"
        assert np.array_equal(np.frombuffer(b"".join(c.data for c in attempt), "<i2"), pcm)


async def test_a_rejected_stream_request_still_ends_its_stream(
        settings: Settings, worker: RunningWorker) -> None:
    names = topic_names(settings.kafka.topic_prefix)
    bad = orjson.dumps({"request_id": "bad-stream", "voice_id": "v", "text": "", "stream": True})
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(names.requests, bad, key=b"v")
    finally:
        await producer.stop()
    deadline = time.monotonic() + 30
    records: list[Any] = []
    while not records and time.monotonic() < deadline:
        await asyncio.sleep(0.3)
        records = [r for r in await read_records(settings, names.audio)
                   if r.key == b"bad-stream"]
    [final] = chunks_of(records)
    assert final.final and final.status == "rejected" and final.error == "invalid_request"


async def run_say(settings: Settings, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "voicefactory", "say", *args, cwd=REPO,
        env=worker_env(settings), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_say_stream_writes_the_chunks_and_reports_the_first_one(
        settings: Settings, voice: str, worker: RunningWorker, tmp_path: Path) -> None:
    out = tmp_path / "streamed.wav"
    code, stdout, stderr = await run_say(settings, TEXT, "--voice", voice, "--stream",
                                         "--out", str(out), "--timeout", "60")
    assert code == 0, stderr
    assert "first chunk after" in stdout and f"-> {out}" in stdout
    audio = decode(out.read_bytes())
    assert audio.duration_s > 2.0 and speech_seconds(audio) > 1.0
    code, stdout, stderr = await run_say(settings, "Nobody speaks.", "--voice", "nobody",
                                         "--stream", "--out", str(tmp_path / "x.wav"),
                                         "--timeout", "60")
    assert code == 1
    assert "rejected: voice_not_found" in stderr
    whole = tmp_path / "whole.flac"  # without --stream: the stored object, downloaded
    code, stdout, stderr = await run_say(settings, "Hello.", "--voice", voice, "--format",
                                         "flac", "--out", str(whole), "--timeout", "60")
    assert code == 0, stderr
    assert f"-> {whole} (s3://" in stdout and decode(whole.read_bytes()).duration_s > 0.3


async def follow_chunks(settings: Settings, request_id: str, until: Any,
                        timeout_s: float) -> list[AudioChunk]:
    """The chunk records of `request_id` from the start of its partition, read until
    `until(chunks)` is true."""
    topic = topic_names(settings.kafka.topic_prefix).audio
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition_for(request_id, AUDIO.partitions))
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        chunks: list[AudioChunk] = []
        deadline = time.monotonic() + timeout_s
        while not until(chunks):
            assert time.monotonic() < deadline, f"gave up after {len(chunks)} chunks"
            for records in (await consumer.getmany(timeout_ms=200)).values():
                chunks += [read_chunk(r.key, r.value, r.headers) for r in records
                           if r.key == request_id.encode()]
        return chunks
    finally:
        await consumer.stop()


async def test_kill_9_mid_stream_restarts_the_stream_as_a_new_attempt(
        settings: Settings, voice: str, tmp_path: Path) -> None:
    # RTF 1 with 0.25-s windows: an 8-s clip streams for 8 s, time enough to kill it.
    env = {"VF_ENGINE": "bench", "VF_BENCH_FIRST_CHUNK_MS": "200",
           "VF_BENCH_PER_AUDIO_SECOND_MS": "1000", "VF_BENCH_CHUNK_SECONDS": "0.25"}
    request = streamed(voice, text="A long streamed line that the first worker never "
                                   "finishes, because it is killed while it is speaking it.")
    first = start_worker(settings, "stream-a", tmp_path / "a.log", **env)
    second = None
    try:
        await _wait_log(tmp_path / "a.log", "assigned partitions", 90)
        producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap, acks="all")
        await producer.start()
        try:
            await producer.send_and_wait(topic_names(settings.kafka.topic_prefix).requests,
                                         encode(request), key=voice.encode())
        finally:
            await producer.stop()
        await follow_chunks(settings, request.request_id, lambda c: len(c) >= 3, 60)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
        second = start_worker(settings, "stream-b", tmp_path / "b.log", **env)
        chunks = await follow_chunks(settings, request.request_id,
                                     lambda c: bool(c) and c[-1].final, 120)
        [result] = [r for r in await wait_for_answers(settings, {request.request_id}, 30)
                    if r.request_id == request.request_id]
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
    attempts = list(dict.fromkeys(c.attempt for c in chunks))
    assert len(attempts) == 2, attempts  # the killed one, then the redelivery's
    killed = [c for c in chunks if c.attempt == attempts[0]]
    answered = [c for c in chunks if c.attempt == attempts[1]]
    assert [c.seq for c in killed] == list(range(len(killed))) and not killed[-1].final
    assert [c.seq for c in answered] == list(range(len(answered)))
    assert answered[-1].final and answered[-1].status == "succeeded"
    assert attempts[0].startswith("1-") and attempts[1].startswith("1-")  # both first tries
    assert result.status == "succeeded"
    pcm, _ = stored_pcm(settings, result)
    assert np.array_equal(np.frombuffer(b"".join(c.data for c in answered), "<i2"), pcm)
