"""Streamed requests in the worker: each through process_stream on its own, chunks to
tts.audio as they are made, the final record before the result.

worker queue: a lane of its own per streamed request (queue_key) -> a dispatcher (dispatch.py)
-> StreamRunner.run(req): a new ChunkStream for this attempt (chunks.py) ->
processor.process_stream in the worker's BatchThreads (gate.py: the batch path's threads;
in_lane sets the lane and holds an interactive stream's device slot), its sink publishing
every chunk -> the outcome back to dispatch.py's retry and answer logic -> StreamRunner.answer:
the attempt's final record (status, error code), acknowledged -> only then Checkpoint.answer
(result and/or DLQ record, offset done). So a stream reader has the final record before the
result exists and before the offset can be committed. A streamed request answered without
running (rejected when decoded) gets its final record on a fresh attempt, so no reader hangs.

Cancellation: `checker(request_id, job_id, tenant)` makes the request's lookup (the worker passes
its CancelRegistry's), asked between chunks (pipeline.streaming stops at the next one).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import orjson
from aiokafka import ConsumerRecord, TopicPartition

from consumers.metrics import WorkerMetrics
from consumers.worker.checkpoint import Checkpoint
from consumers.worker.chunks import ChunkPublisher, ChunkStream
from consumers.worker.gate import BatchThreads
from consumers.worker.inflight import InFlightRequest
from consumers.worker.lanes import lane_of
from pipeline.synthesis import Outcome, RequestProcessor
from topics.chunks import reply_partition
from topics.errors import ErrorCode, VoiceFactoryError
from topics.events import DeadLetter, SynthesisRequest, SynthesisResult
from topics.specs import TopicNames
from topics.tenancy import scoped_id

log = logging.getLogger(__name__)


_STREAM = "\x00stream\x00"  # in a streamed request's queue key; no voice ID holds a NUL


def queue_key(request: SynthesisRequest) -> str:
    """The worker queue's lane: the tenant's voice, so its requests batch together (two
    tenants' voices of one ID are two queues, resolved to their own profiles); a streamed
    request is a lane of its own, so it is never batched and goes as soon as a dispatcher
    is free."""
    voice = scoped_id(request.tenant, request.voice_id)
    if request.stream:
        return f"{voice}{_STREAM}{request.request_id}"
    return voice


def mixable(key: str) -> bool:
    """Whether the queue `key` (queue_key) may share a batch with other voices' queues, for
    an engine that mixes voices: every queue but a streamed request's."""
    return _STREAM not in key


def _never(request_id: str, job_id: str | None, tenant: str | None) -> Callable[[], bool]:
    return lambda: False


def wants_stream(value: bytes | None) -> bool:
    """Whether a record that failed validation asked for a stream (its reader waits)."""
    try:
        obj = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return False
    return isinstance(obj, dict) and obj.get("stream") is True


class StreamRunner:
    def __init__(self, *, chunks: ChunkPublisher, processor: RequestProcessor,
                 checkpoint: Checkpoint, metrics: WorkerMetrics, names: TopicNames,
                 threads: BatchThreads,
                 checker: Callable[[str, str | None, str | None],
                                   Callable[[], bool]] = _never) -> None:
        self._chunks = chunks
        # The batch path's pool, not asyncio's default executor (why: gate.BatchThreads);
        # a stream takes a dispatcher as a batch does, so the pool's one thread per
        # dispatcher serves both.
        self._threads = threads
        self._names = names
        self._processor = processor
        self._cp = checkpoint
        self._metrics = metrics
        self._checker = checker

    async def run(self, req: InFlightRequest) -> Outcome:
        """One attempt: its chunks are on their way when this returns; not yet its final."""
        stream = req.stream = self._chunks.open(
            request_id=req.request.request_id, attempt=req.attempt,
            reply_partition=reply_partition(req.record.headers), lane=req.lane,
            consumed_at=req.consumed_at)
        cancelled = self._checker(req.request_id, req.job_id, req.request.tenant)
        request, received = req.received(cancelled)
        sink = stream.sink(asyncio.get_running_loop(), cancelled)
        try:
            outcome = await self._threads.run(req.lane, self._processor.process_stream,
                                              request, received, sink)
        except Exception as exc:  # a bug must not block the partition: retried, then failed
            log.exception("stream crashed", extra=req.ctx())
            return VoiceFactoryError(ErrorCode.ENGINE_ERROR, f"internal error: {exc!r}",
                                     retryable=True)
        engine_ms = (outcome.timings_ms.get("engine_first_chunk")
                     if isinstance(outcome, SynthesisResult) else None)
        if engine_ms is not None:
            self._metrics.on_first_chunk(stream.lane, "engine", engine_ms / 1000)
        return outcome

    async def answer(self, tp: TopicPartition, rec: ConsumerRecord[bytes, bytes], *,
                     result: SynthesisResult, dlq: DeadLetter | None = None,
                     stream: ChunkStream | None = None) -> None:
        """The final record of `stream` (a fresh attempt if None), then Checkpoint.answer."""
        if stream is None or stream.closed:
            stream = self._chunks.open(request_id=result.request_id,
                                       attempt=result.attempt or 1,
                                       reply_partition=reply_partition(rec.headers),
                                       lane=lane_of(rec.topic, self._names))
        try:
            await stream.close(result.status, result.error.code if result.error else None)
        except BaseException:
            self._cp.abandon(tp, rec.offset)  # no final, no result: the record comes again
            raise
        await self._cp.answer(tp, rec, result=result, dlq=dlq)
