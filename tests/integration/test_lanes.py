"""Lanes and cancellation on the real stack: interactive before a batch backlog, a cancelled
job answered without engine calls, and both lanes of a partition on one group member."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from consumers.clients.control import cancel_command
from consumers.clients.demo import make_reference
from consumers.clients.produce import request_and_wait
from consumers.kafka import assignors, make_consumer, make_producer
from consumers.settings import Settings
from consumers.wiring import make_store
from consumers.worker.lanes import lane_topics
from pipeline.engines.base import Profile, SynthesisItem, Synthesized
from pipeline.frontend import prepare
from pipeline.voices import register_voice
from tests.integration.conftest import RunningWorker
from tests.integration.test_jobs import Aggregator, _wait_for_job
from tests.integration.workers import REPO, produce, wait_for_answers, worker_env
from topics.chunks import AudioChunk, read_chunk
from topics.control import decode_control
from topics.events import JobRef, SynthesisRequest, encode
from topics.partitioning import partition_for
from topics.specs import AUDIO, CONTROL, REQUESTS, REQUESTS_SHARDS, topic_names

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture
def voices(settings: Settings, tmp_path: Path) -> list[str]:
    reference = make_reference(tmp_path / "reference.wav")
    store = make_store(settings.store)
    ids = ["lane-a", "lane-b", "lane-c"]
    for voice_id in ids:
        register_voice(store, voice_id=voice_id, reference=reference, prompt_text=None,
                       language="en")
    return ids


def _count_engine_texts(running: RunningWorker, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every text the engine is called on, from the engine object the processor holds."""
    engine = running.runtime.engine
    real = engine.synthesize
    seen: list[str] = []
    lock = threading.Lock()

    def counting(profile: Profile, batch: list[SynthesisItem]) -> list[Synthesized]:
        with lock:
            seen.extend(item.text for item in batch)
        return real(profile, batch)

    monkeypatch.setattr(engine, "synthesize", counting)
    return seen


async def _until_answered(running: RunningWorker, n: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while running.worker.processed < n:
        assert time.monotonic() < deadline, f"only {running.worker.processed} of {n} answered"
        await asyncio.sleep(0.02)


async def test_an_interactive_request_overtakes_a_batch_backlog(
        settings: Settings, voices: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_BENCH_BASE_MS", "150")  # every engine call: 150 ms
    s = settings.with_overrides(engine={"name": "bench"},
                                worker={"max_inflight": 1, "max_batch": 1})
    tag = uuid.uuid4().hex[:6]
    backlog = [SynthesisRequest(request_id=f"bl-{tag}-{i:03d}", voice_id=voices[i % 2],
                                text=f"Backlog line {i}.", language="en") for i in range(40)]
    await produce(s, backlog)  # 40 x 150 ms: 6 s of batch work queued before the caller
    async with RunningWorker(s) as running:
        await _until_answered(running, 3)
        call = SynthesisRequest(request_id=f"call-{tag}", voice_id=voices[0],
                                text="Your call is important to us.", language="en")
        started = time.monotonic()
        [answer] = (await request_and_wait(s, [call], timeout_s=60,
                                           interactive=True)).values()
        took = time.monotonic() - started
        backlog_done_then = running.worker.processed - 1
        metrics = running.runtime.metrics.render()[0].decode()
        results = await wait_for_answers(s, {r.request_id for r in backlog}, 120)
    assert answer.status == "succeeded", answer.error
    # Queued -> dispatched: at most the batch line in the engine and the one a dispatcher
    # took before the call came (2 x 150 ms), not the 5 s the rest of the backlog takes.
    assert answer.timings_ms["queued"] < 1500, answer.timings_ms
    assert took < 5.0, took
    assert backlog_done_then <= 20, backlog_done_then  # half the backlog still queued
    assert {r.status for r in results if r.request_id != call.request_id} == {"succeeded"}
    assert 'vf_lane_requests_total{lane="interactive",status="succeeded"} 1.0' in metrics
    assert 'vf_lane_wait_seconds_count{lane="interactive"} 1.0' in metrics


async def test_a_cancelled_job_s_queued_lines_are_answered_cancelled_without_the_engine(
        settings: Settings, voices: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_BENCH_BASE_MS", "100")
    s = settings.with_overrides(engine={"name": "bench"},
                                worker={"max_inflight": 1, "max_batch": 1})
    job_id = f"film-{uuid.uuid4().hex[:6]}"
    lines = [SynthesisRequest(request_id=f"{job_id}-{i:04d}", voice_id=voices[0],
                              text=f"Scene line {i} of the film.", language="en",
                              job=JobRef(id=job_id, index=i, total=100)) for i in range(100)]
    async with RunningWorker(s) as running:
        engine_texts = _count_engine_texts(running, monkeypatch)
        await produce(s, lines)
        await _until_answered(running, 3)
        assert await cancel_command(s, request_id=None, job_id=job_id,
                                    reason="script withdrawn") == 0
        results = await wait_for_answers(s, {r.request_id for r in lines}, 60)
        calls_after = len(engine_texts)
        await asyncio.sleep(0.5)
        assert len(engine_texts) == calls_after  # nothing of the job reaches the engine later
    by_id = {r.request_id: r for r in results}
    assert len(results) == len(by_id) == 100  # one answer each
    done = {i for i, line in enumerate(lines) if by_id[line.request_id].status == "succeeded"}
    cancelled = {i for i, line in enumerate(lines)
                 if by_id[line.request_id].status == "cancelled"}
    assert done | cancelled == set(range(100))
    # Finished before the cancel arrived: the 3 awaited, and what ran while it was produced.
    assert len(done) >= 3 and len(cancelled) >= 60, sorted(done)
    # Zero engine calls for the cancelled lines: the engine saw exactly the finished ones
    # (as the text front-end hands them over: "line 37" -> "line thirty-seven").
    assert sorted(engine_texts) == sorted(
        sentence for i in done
        for sentence in prepare(lines[i].text, language="en", instruct=None).sentences)
    for i in cancelled:
        result = by_id[lines[i].request_id]
        assert result.error is not None
        assert (result.error.code, result.error.retryable) == ("cancelled", False)
        assert result.error.message == "cancelled before synthesis: script withdrawn"
        assert result.audio is None and result.job == lines[i].job
    # Every answer was acknowledged before its offset was committed, and all were committed.
    assert await _committed(s, REQUESTS.name) == 100


async def test_a_cancelled_job_closes_as_soon_as_its_last_line_is_answered_cancelled(
        settings: Settings, voices: list[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_BENCH_BASE_MS", "100")
    s = settings.with_overrides(engine={"name": "bench"},
                                worker={"max_inflight": 1, "max_batch": 1})
    agg = Aggregator(s, tmp_path, timeout_s=600)  # closing on the timeout would take 10 min
    agg.start()
    try:
        await agg.ready()
        job_id = f"reel-{uuid.uuid4().hex[:6]}"
        lines = [SynthesisRequest(request_id=f"{job_id}-{i:04d}", voice_id=voices[2],
                                  text=f"Reel line {i}.", language="en",
                                  metadata={"text": f"Reel line {i}."},
                                  job=JobRef(id=job_id, index=i, total=30)) for i in range(30)]
        async with RunningWorker(s) as running:
            await produce(s, lines)
            await _until_answered(running, 2)
            assert await cancel_command(s, request_id=None, job_id=job_id, reason="recut") == 0
            event = await _wait_for_job(s, job_id, 60, agg)
    finally:
        assert agg.stop() == 0
    statuses = [c.status for c in event.clips]
    assert event.total == 30 and event.missing == [] and len(statuses) == 30
    assert set(statuses) == {"succeeded", "cancelled"} and statuses.count("succeeded") >= 2
    assert event.status == "partial"
    assert [span.index for span in event.timeline] == [
        c.index for c in event.clips if c.status == "succeeded"]


async def test_a_cancel_made_while_no_worker_ran_applies_to_the_backlog_it_finds(
        settings: Settings, voices: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    s = settings.with_overrides(engine={"name": "bench"})
    job_id = f"night-{uuid.uuid4().hex[:6]}"
    lines = [SynthesisRequest(request_id=f"{job_id}-{i:04d}", voice_id=voices[i % 3],
                              text="Produced before the cancel, fetched after.",
                              language="en", job=JobRef(id=job_id, index=i, total=20))
             for i in range(20)]
    await produce(s, lines)
    assert await cancel_command(s, request_id=None, job_id=job_id, reason=None) == 0
    async with RunningWorker(s) as running:  # replays tts.control before it fetches
        engine_texts = _count_engine_texts(running, monkeypatch)
        results = await wait_for_answers(s, {r.request_id for r in lines}, 60)
    assert {r.status for r in results} == {"cancelled"} and len(results) == 20
    assert engine_texts == []


async def test_a_request_produced_after_its_cancel_is_never_synthesized(
        settings: Settings, voices: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    s = settings.with_overrides(engine={"name": "bench"})
    late = SynthesisRequest(request_id=f"late-{uuid.uuid4().hex[:6]}", voice_id=voices[1],
                            text="Too late for this one.", language="en")
    async with RunningWorker(s) as running:
        engine_texts = _count_engine_texts(running, monkeypatch)
        assert await cancel_command(s, request_id=late.request_id, job_id=None,
                                    reason=None) == 0
        deadline = time.monotonic() + 30
        while running.worker.cancels.reason(late.request_id) is None:
            assert time.monotonic() < deadline, "the worker never read the cancel"
            await asyncio.sleep(0.05)
        [answer] = (await request_and_wait(s, [late], timeout_s=60,
                                           interactive=True)).values()
        metrics = running.runtime.metrics.render()[0].decode()
    assert answer.status == "cancelled" and engine_texts == []
    assert 'vf_control_commands_total{result="applied"} 1.0' in metrics
    assert 'vf_lane_requests_total{lane="interactive",status="cancelled"} 1.0' in metrics


async def test_range_keeps_both_lanes_of_a_partition_on_one_member(settings: Settings) -> None:
    """Three consumers configured as the worker configures its own (VF_ASSIGNOR=range, both
    lanes' plain and shard topics), in one group on the real broker."""
    names = topic_names(settings.kafka.topic_prefix)
    group = f"{settings.worker.group_id}-copart"
    members: list[AIOKafkaConsumer] = []
    for _ in range(3):
        consumer = make_consumer(settings.kafka, group_id=group, enable_auto_commit=False,
                                 partition_assignment_strategy=assignors("range"))
        consumer.subscribe(lane_topics(names))
        members.append(consumer)
    await asyncio.gather(*(c.start() for c in members))
    try:
        owners = await _settled(members, 2 * REQUESTS.partitions + 2 * REQUESTS_SHARDS.partitions)
    finally:
        await asyncio.gather(*(c.stop() for c in members))
    for p in range(REQUESTS.partitions):
        assert owners[TopicPartition(names.requests, p)] == \
            owners[TopicPartition(names.requests_interactive, p)], p
    for p in range(REQUESTS_SHARDS.partitions):
        assert owners[TopicPartition(names.requests_shards, p)] == \
            owners[TopicPartition(names.requests_interactive_shards, p)], p
    assert len(set(owners.values())) == 3


async def produce_interactive(settings: Settings, request: SynthesisRequest) -> None:
    producer = make_producer(settings.kafka)
    await producer.start()
    try:
        await producer.send_and_wait(topic_names(settings.kafka.topic_prefix)
                                     .requests_interactive, encode(request),
                                     key=request.voice_id.encode())
    finally:
        await producer.stop()


async def _settled(members: list[AIOKafkaConsumer], total: int,
                   timeout_s: float = 60) -> dict[TopicPartition, int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        # Every member keeps polling: an idle aiokafka consumer does not rejoin.
        await asyncio.gather(*(c.getmany(timeout_ms=100) for c in members))
        owners = {tp: i for i, c in enumerate(members) for tp in c.assignment()}
        if len(owners) == total and sum(len(c.assignment()) for c in members) == total \
                and all(c.assignment() for c in members):
            return owners
    raise AssertionError("the group never settled with every member owning partitions")


async def _committed(settings: Settings, spec_name: str) -> int:
    """The worker group's committed offsets on one request topic, summed."""
    topic = settings.kafka.topic_prefix + spec_name
    reader = make_consumer(settings.kafka, group_id=settings.worker.group_id,
                           enable_auto_commit=False)
    await reader.start()
    try:
        total = 0
        for p in range(REQUESTS.partitions):
            total += await reader.committed(TopicPartition(topic, p)) or 0
        return total
    finally:
        await reader.stop()


async def test_the_cancel_command_produces_a_checked_command_keyed_by_the_id(
        settings: Settings) -> None:
    env = worker_env(settings)
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "voicefactory", "cancel", "--job", "ep12",
                         "--reason", "recut"], cwd=REPO, env=env, capture_output=True,
        text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "cancel of job ep12 sent" in done.stdout
    names = topic_names(settings.kafka.topic_prefix)
    reader = make_consumer(settings.kafka, group_id=None, enable_auto_commit=False)
    await reader.start()
    try:
        tps = [TopicPartition(names.control, p) for p in range(CONTROL.partitions)]
        reader.assign(tps)
        await reader.seek_to_beginning(*tps)
        records = [r for batch in (await reader.getmany(timeout_ms=3000)).values() for r in batch]
    finally:
        await reader.stop()
    assert [r.key for r in records] == [b"ep12"]
    command = decode_control(records[0].value)
    assert (command.job_id, command.request_id, command.reason) == ("ep12", None, "recut")
    assert command.requested_at is not None
    bad = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "voicefactory", "cancel", "--request", "a b"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "request_id 'a b'" in bad.stderr


async def test_a_stream_cancelled_midway_stops_within_a_chunk(
        settings: Settings, voices: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_BENCH_CHUNK_SECONDS", "0.25")
    monkeypatch.setenv("VF_BENCH_PER_AUDIO_SECOND_MS", "1000")  # real time: a chunk / 0.25 s
    s = settings.with_overrides(engine={"name": "bench"})
    request = SynthesisRequest(request_id=f"st-{uuid.uuid4().hex[:8]}", voice_id=voices[0],
                               text="A long answer for the caller, read out slowly. " * 4,
                               language="en", stream=True)
    names = topic_names(s.kafka.topic_prefix)
    reader = make_consumer(s.kafka, group_id=None, enable_auto_commit=False)
    await reader.start()
    seen: list[AudioChunk] = []
    try:
        tp = TopicPartition(names.audio, partition_for(request.request_id, AUDIO.partitions))
        reader.assign([tp])
        await reader.seek_to_end(tp)
        await reader.position(tp)
        async with RunningWorker(s):
            await produce_interactive(s, request)
            at_cancel = None
            deadline = time.monotonic() + 60
            while not (seen and seen[-1].final):
                assert time.monotonic() < deadline, f"{len(seen)} chunks, no final record"
                for records in (await reader.getmany(timeout_ms=100)).values():
                    seen.extend(read_chunk(r.key, r.value, r.headers) for r in records)
                if at_cancel is None and len(seen) >= 3:
                    assert await cancel_command(s, request_id=request.request_id,
                                                job_id=None, reason="caller hung up") == 0
                    at_cancel = len(seen)
            [result] = [r for r in await wait_for_answers(s, {request.request_id}, 30)
                        if r.request_id == request.request_id]
    finally:
        await reader.stop()
    assert at_cancel is not None
    audio = [c for c in seen if not c.final]
    assert len(audio) <= at_cancel + 2, (at_cancel, len(audio))  # the one under way, at most
    assert len(audio) < 20  # far from the ~40 the whole text makes
    assert seen[-1].status == "cancelled" and result.status == "cancelled"
    assert result.audio is None
