"""StreamRunner (streams.py) with the real processor over the bench engine and a dict store,
and the injected producer fake: chunks per attempt, cancellation between chunks, the final
record before the result, the batch path's threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from consumers.metrics import WorkerMetrics
from consumers.worker.batching import Lane
from consumers.worker.chunks import ChunkPublisher
from consumers.worker.gate import LANE, BatchThreads, LaneGate
from consumers.worker.inflight import InFlightRequest
from consumers.worker.streams import StreamRunner
from pipeline.streaming import ChunkSink
from pipeline.synthesis import Outcome, Received, RequestProcessor
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


@pytest.fixture
def threads() -> Iterator[BatchThreads]:
    pool = BatchThreads(None, 2)
    yield pool
    pool.shutdown()


def runner(producer: FakeProducer, metrics: WorkerMetrics, threads: BatchThreads, *,
           proc: RequestProcessor | None = None, **kw: Any) -> StreamRunner:
    proc = proc or processor()[0]
    return StreamRunner(names=NAMES, chunks=ChunkPublisher(producer=producer, topic=NAMES.audio,
                                              metrics=metrics),
                        processor=proc, checkpoint=make_checkpoint(FakeConsumer(), producer),
                        metrics=metrics, threads=threads, **kw)


def streamed(offset: int = 0, lane: Lane = "batch") -> InFlightRequest:
    request = SynthesisRequest(request_id=f"r{offset}", voice_id="v", text=TEXT, stream=True)
    return InFlightRequest(record(offset), P0, request, datetime.now(UTC), lane=lane)


async def test_a_run_sends_the_attempts_chunks_and_the_answer_ends_it(
        threads: BatchThreads) -> None:
    producer, metrics = FakeProducer(), WorkerMetrics()
    run = runner(producer, metrics, threads)
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


async def test_the_cancellation_lookup_stops_a_stream_at_its_next_chunk(
        threads: BatchThreads) -> None:
    producer, metrics = FakeProducer(), WorkerMetrics()
    run = runner(producer, metrics, threads, checker=lambda request_id, job_id, tenant: (
        lambda: request_id == "r0" and len(producer.sent) >= 2))
    outcome = await run.run(streamed())
    assert isinstance(outcome, SynthesisResult) and outcome.status == "cancelled"
    assert len(producer.sent) == 2



def holds_the_slot(gate: LaneGate) -> bool:
    """Whether this thread holds `gate`'s one slot: a batch-lane prober queues for it then,
    else it gets in at once (the gate decides either under its lock)."""
    entered = threading.Event()

    def enter() -> None:
        with gate:  # LANE's default: batch
            entered.set()

    prober = threading.Thread(target=enter, daemon=True)  # gets in once the call is done
    prober.start()
    while not entered.is_set() and not gate.waiting("batch"):
        time.sleep(0.001)
    return not entered.is_set()


@pytest.mark.parametrize("lane", ["batch", "interactive"])
async def test_a_stream_runs_in_the_batch_threads_as_its_lane(
        lane: Lane, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not asyncio's default executor (gate.BatchThreads says why); an interactive stream
    holds its device slot from the start of the call, as an interactive batch does."""
    gate = LaneGate(1, batch_share=0.1)
    pool = BatchThreads(gate, 2)
    proc = processor()[0]
    seen: list[tuple[str, Lane, bool]] = []
    stream = proc.process_stream

    def watched(request: SynthesisRequest, received: Received, sink: ChunkSink) -> Outcome:
        seen.append((threading.current_thread().name, LANE.get(), holds_the_slot(gate)))
        return stream(request, received, sink)

    monkeypatch.setattr(proc, "process_stream", watched)
    try:
        outcome = await runner(FakeProducer(), WorkerMetrics(), pool, proc=proc).run(
            streamed(lane=lane))
    finally:
        pool.shutdown()
    assert isinstance(outcome, SynthesisResult) and outcome.status == "succeeded"
    [(name, in_lane, holding)] = seen
    assert name.startswith("vf-batch") and in_lane == lane
    assert holding is (lane == "interactive")
