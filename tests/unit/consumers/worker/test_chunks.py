"""Chunk records on tts.audio (chunks.py) and the streamed answer's order (streams.py), over
the injected producer fake; the broker itself is exercised by tests/integration."""

from __future__ import annotations

import asyncio
import re

import pytest
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    MessageSizeTooLargeError,
    ProducerFenced,
)

from consumers.metrics import WorkerMetrics
from consumers.worker.chunks import CHUNKS_LOST, MAX_RECORD_BYTES, ChunkPublisher
from consumers.worker.errors import FatalPublishError
from consumers.worker.gate import BatchThreads
from consumers.worker.streams import StreamRunner, queue_key, wants_stream
from tests.unit.consumers.worker.fakes import (
    NAMES,
    P0,
    FakeConsumer,
    FakeProducer,
    make_checkpoint,
    record,
)
from topics.chunks import REPLY_PARTITION, read_chunk
from topics.events import ErrorInfo, SynthesisRequest, SynthesisResult


def publisher(producer: FakeProducer, metrics: WorkerMetrics | None = None) -> ChunkPublisher:
    return ChunkPublisher(producer=producer, topic=NAMES.audio, metrics=metrics,
                          max_backoff_s=0.01)


async def test_chunks_count_from_zero_and_the_final_record_ends_the_attempt() -> None:
    producer = FakeProducer()
    stream = publisher(producer).open(request_id="r1", attempt=1, reply_partition=None)
    await stream.send(b"\x01\x00" * 100, 24000)
    await stream.send(b"\x02\x00" * 50, 24000)
    await stream.close("succeeded")
    chunks = [read_chunk(s.key, s.value, s.headers) for s in producer.sent]
    assert [c.seq for c in chunks] == [0, 1, 2]
    assert [c.final for c in chunks] == [False, False, True]
    assert {s.topic for s in producer.sent} == {NAMES.audio}
    assert {c.request_id for c in chunks} == {"r1"} and {c.sample_rate for c in chunks} == {24000}
    assert {c.encoding for c in chunks} == {"pcm_s16le"}
    assert len({c.attempt for c in chunks}) == 1
    assert re.fullmatch(r"1-[0-9a-f]{8}", chunks[0].attempt)
    assert chunks[2].data == b"" and chunks[2].status == "succeeded" and chunks[2].error is None
    assert [s.partition for s in producer.sent] == [None] * 3  # the key's partition


async def test_a_big_chunk_is_split_into_records_under_the_limit() -> None:
    producer = FakeProducer()
    stream = publisher(producer).open(request_id="r1", attempt=1, reply_partition=None)
    pcm = bytes(range(256)) * (MAX_RECORD_BYTES * 2 // 256 + 3)
    await stream.send(pcm, 22050)
    assert [len(s.value) for s in producer.sent] == [MAX_RECORD_BYTES, MAX_RECORD_BYTES, 768]
    assert b"".join(s.value for s in producer.sent) == pcm
    assert [read_chunk(s.key, s.value, s.headers).seq for s in producer.sent] == [0, 1, 2]


async def test_a_failed_answer_carries_its_status_and_error_code() -> None:
    producer = FakeProducer()
    stream = publisher(producer).open(request_id="r1", attempt=3, reply_partition=None)
    await stream.close("cancelled", "cancelled")
    [final] = [read_chunk(s.key, s.value, s.headers) for s in producer.sent]
    assert (final.seq, final.final, final.status, final.error) == (0, True, "cancelled",
                                                                   "cancelled")
    assert final.attempt.startswith("3-")


async def test_every_attempt_has_its_own_id_even_with_the_same_counter() -> None:
    # A worker restarted after kill -9 counts attempts from 1 again.
    pub = publisher(FakeProducer())
    ids = {pub.open(request_id="r1", attempt=1, reply_partition=None).attempt
           for _ in range(50)}
    assert len(ids) == 50


async def test_the_reply_partition_is_honoured_when_the_topic_has_it() -> None:
    producer = FakeProducer()
    pub = publisher(producer)
    stream = pub.open(request_id="r1", attempt=1, reply_partition=7)
    await stream.send(b"\x00\x00", 16000)
    await stream.close("succeeded")
    assert [s.partition for s in producer.sent] == [7, 7]
    outside = pub.open(request_id="r2", attempt=1, reply_partition=12)
    await outside.send(b"\x00\x00", 16000)
    assert producer.sent[-1].partition is None  # no partition 12: the key decides


async def test_the_final_record_waits_for_the_chunks_and_retries_the_broker() -> None:
    producer = FakeProducer(hold=True)
    stream = publisher(producer).open(request_id="r1", attempt=1, reply_partition=None)
    await stream.send(b"\x00\x00", 16000)
    closing = asyncio.create_task(stream.close("succeeded"))
    await asyncio.sleep(0.02)
    assert len(producer.sent) == 1 and not closing.done()  # the chunk is not acknowledged
    producer.hold = False
    producer.fail, producer.fail_times = KafkaConnectionError(), 2
    producer.acknowledge_all()
    await asyncio.wait_for(closing, 5)
    assert stream.closed and read_chunk(producer.sent[-1].key, producer.sent[-1].value,
                                        producer.sent[-1].headers).final


async def test_a_lost_chunk_ends_the_stream_failed() -> None:
    producer = FakeProducer(hold=True)
    stream = publisher(producer).open(request_id="r1", attempt=1, reply_partition=None)
    await stream.send(b"\x00\x00", 16000)
    producer.sent[0].delivery.set_exception(MessageSizeTooLargeError("refused"))
    producer.hold = False
    await asyncio.wait_for(stream.close("succeeded"), 5)
    final = read_chunk(producer.sent[-1].key, producer.sent[-1].value, producer.sent[-1].headers)
    assert final.final and final.status == "failed" and final.error == CHUNKS_LOST


async def test_a_final_record_refused_for_good_is_not_retried() -> None:
    producer = FakeProducer(fail=MessageSizeTooLargeError("refused"))
    stream = publisher(producer).open(request_id="r1", attempt=1, reply_partition=None)
    await asyncio.wait_for(stream.close("succeeded"), 5)  # no loop
    assert stream.closed and producer.fail is not None and producer.sent == []


async def test_a_fatal_producer_error_on_the_final_record_is_reported() -> None:
    seen: list[KafkaError] = []
    producer = FakeProducer(fail=ProducerFenced())
    pub = ChunkPublisher(producer=producer, topic=NAMES.audio, max_backoff_s=0.01,
                         on_fatal=seen.append)
    stream = pub.open(request_id="r1", attempt=1, reply_partition=None)
    with pytest.raises(FatalPublishError):
        await asyncio.wait_for(stream.close("succeeded"), 5)
    assert [type(e) for e in seen] == [ProducerFenced] and not stream.closed


async def test_a_thread_sink_sends_in_order_and_reports_first_chunk_latency() -> None:
    producer, metrics = FakeProducer(), WorkerMetrics()
    stream = publisher(producer, metrics).open(request_id="r1", attempt=1,
                                               reply_partition=None,
                                               lane="interactive", consumed_at=0.0)
    sink = stream.sink(asyncio.get_running_loop(), cancelled=lambda: True)

    def produce() -> None:
        for i in range(20):
            sink.chunk(i.to_bytes(2, "little"), 24000)

    await asyncio.to_thread(produce)  # the loop stays free to take the chunks
    assert [int.from_bytes(s.value, "little") for s in producer.sent] == list(range(20))
    assert sink.cancelled()
    count = metrics.registry.get_sample_value("vf_first_chunk_seconds_count",
                                              {"lane": "interactive", "since": "consumed"})
    chunks = metrics.registry.get_sample_value("vf_audio_chunks_total", {"lane": "interactive"})
    assert (count, chunks) == (1.0, 20.0)


def test_stream_requests_are_told_apart() -> None:  # lanes: test_lanes.py, lane_of
    assert wants_stream(b'{"request_id": "r", "stream": true, "text": 5}')
    assert not wants_stream(b'{"stream": "yes"}') and not wants_stream(b"not json")
    assert not wants_stream(None)


def test_a_streamed_request_is_a_queue_lane_of_its_own() -> None:
    def key(request_id: str, stream: bool) -> str:
        return queue_key(SynthesisRequest(request_id=request_id, voice_id="v", text="t",
                                          stream=stream))

    assert key("a", False) == key("b", False) == "v"  # batched by voice
    assert len({key("a", True), key("b", True), key("a", False)}) == 3


def answer(status: str) -> SynthesisResult:
    error = None if status == "succeeded" else ErrorInfo(code="engine_error", message="x")
    return SynthesisResult(request_id="r0", voice_id="v1", status=status,  # type: ignore[arg-type]
                           completed_at="2026-12-02T00:00:00Z", error=error)


async def test_the_final_record_is_acknowledged_before_the_result_is_sent() -> None:
    consumer, producer = FakeConsumer(), FakeProducer()
    cp = make_checkpoint(consumer, producer)
    runner = StreamRunner(chunks=publisher(producer), names=NAMES, processor=None,  # type: ignore[arg-type]
                          checkpoint=cp, metrics=WorkerMetrics(),
                          threads=BatchThreads(None, 1))  # answers only: never used
    rec = record(0)
    rec.headers.append((REPLY_PARTITION, b"3"))
    assert cp.begin(P0, 0)
    await runner.answer(P0, rec, result=answer("failed"))  # never streamed: a fresh attempt
    assert [s.topic for s in producer.sent] == [NAMES.audio, NAMES.results]
    final = read_chunk(producer.sent[0].key, producer.sent[0].value, producer.sent[0].headers)
    assert (final.final, final.status, final.error, final.seq) == (True, "failed",
                                                                   "engine_error", 0)
    assert producer.sent[0].partition == 3
    await cp.commit()
    assert consumer.commits == [{P0: 1}]


async def test_no_final_record_means_no_result_and_no_commit() -> None:
    consumer, producer = FakeConsumer(), FakeProducer(fail=KafkaConnectionError())
    cp = make_checkpoint(consumer, producer)
    runner = StreamRunner(chunks=publisher(producer), names=NAMES, processor=None,  # type: ignore[arg-type]
                          checkpoint=cp, metrics=WorkerMetrics(),
                          threads=BatchThreads(None, 1))  # answers only: never used
    assert cp.begin(P0, 0)
    task = asyncio.create_task(runner.answer(P0, record(0), result=answer("succeeded")))
    await asyncio.sleep(0.05)  # the final record keeps failing: retried, nothing else sent
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert producer.sent == [] and cp.inflight(P0) == 0
    await cp.commit()
    assert consumer.commits == []
