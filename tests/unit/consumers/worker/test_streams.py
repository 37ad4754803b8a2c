"""StreamRunner (streams.py) with the real processor over the bench engine and a dict store,
and the injected producer fake: chunks per attempt, cancellation between chunks, the final
record before the result."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from consumers.metrics import WorkerMetrics
from consumers.worker.chunks import ChunkPublisher
from consumers.worker.inflight import InFlightRequest
from consumers.worker.streams import StreamRunner
from tests.unit.consumers.worker.fakes import (
    NAMES,
    P0,
    FakeConsumer,
    FakeProducer,
    make_checkpoint,
    record,
)
from tests.unit.pipeline.test_streaming import processor
from topics.chunks import read_chunk
from topics.events import SynthesisRequest, SynthesisResult

TEXT = "One sentence to stream. And another one after it."


def runner(producer: FakeProducer, metrics: WorkerMetrics, **kw: Any) -> StreamRunner:
    proc, _, _ = processor()
    return StreamRunner(names=NAMES, chunks=ChunkPublisher(producer=producer, topic=NAMES.audio,
                                              metrics=metrics),
                        processor=proc, checkpoint=make_checkpoint(FakeConsumer(), producer),
                        metrics=metrics, **kw)


def streamed(offset: int = 0) -> InFlightRequest:
    request = SynthesisRequest(request_id=f"r{offset}", voice_id="v", text=TEXT, stream=True)
    return InFlightRequest(record(offset), P0, request, datetime.now(UTC))


async def test_a_run_sends_the_attempts_chunks_and_the_answer_ends_it() -> None:
    producer, metrics = FakeProducer(), WorkerMetrics()
    run = runner(producer, metrics)
    req = streamed()
    outcome = await run.run(req)
    assert isinstance(outcome, SynthesisResult) and outcome.status == "succeeded"
    chunks = [read_chunk(s.key, s.value, s.headers) for s in producer.sent]
    assert len(chunks) > 4 and [c.seq for c in chunks] == list(range(len(chunks)))
    assert req.stream is not None and {c.attempt for c in chunks} == {req.stream.attempt}
    await run.answer(P0, req.record, result=outcome, stream=req.stream)
    final = read_chunk(producer.sent[-2].key, producer.sent[-2].value, producer.sent[-2].headers)
    assert final.final and final.seq == len(chunks) and final.status == "succeeded"
    assert producer.sent[-1].topic == NAMES.results
    engine = metrics.registry.get_sample_value("vf_first_chunk_seconds_count",
                                               {"lane": "batch", "since": "engine"})
    assert engine == 1.0
    again = await run.run(req)  # a retry: a new attempt id, seq from 0 again
    assert isinstance(again, SynthesisResult)
    retried = [read_chunk(s.key, s.value, s.headers) for s in producer.sent
               if s.topic == NAMES.audio][len(chunks) + 1:]
    assert retried[0].seq == 0 and retried[0].attempt != chunks[0].attempt


async def test_the_cancellation_lookup_stops_a_stream_at_its_next_chunk() -> None:
    producer, metrics = FakeProducer(), WorkerMetrics()
    run = runner(producer, metrics, checker=lambda request_id, job_id: (
        lambda: request_id == "r0" and len(producer.sent) >= 2))
    outcome = await run.run(streamed())
    assert isinstance(outcome, SynthesisResult) and outcome.status == "cancelled"
    assert len(producer.sent) == 2
