"""Streamed audio to `tts.audio`: one attempt's PCM chunks, then the record that ends it.

    processing thread: ThreadSink.chunk(pcm, rate) --(hands over to the event loop and
        waits only for the enqueue)--> ChunkStream.send: records of at most
        MAX_RECORD_BYTES, key = request_id, headers from topics.chunks (seq from 0, this
        attempt's id, rate, encoding) -> producer.send, acks not awaited, order kept
    worker loop, before the result of a streamed request is published:
        ChunkStream.close(status, code): every chunk's delivery, then the final record
        (empty value, vf-final=1, vf-status, vf-error when not succeeded), sent and
        acknowledged under the worker's one error policy (errors.deliver): retriable errors
        back off and send again; when a chunk of the attempt was lost the stream ends
        `failed` with vf-error `chunks_lost`; a final record refused for good is logged and
        the stream counts as closed (its reader still gets the result); a fatal producer
        error propagates (FatalPublishError)

The partition is the one the request's producer named in `vf-reply-partition`, else the
key's. Attempt ids are "<attempt>-<8 random hex>": new for every attempt, so a reader tells
a restart (a retry, or a redelivery after a worker died, whose attempt counter starts at 1
again) from a continuation by comparing it for equality; seq starts at 0 on every attempt.
An attempt that ends in a retry or a crash has no final record: the next attempt replaces
it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from consumers.metrics import WorkerMetrics
from consumers.worker.errors import Backoff, OnFatal, Undeliverable, deliver
from topics.chunks import chunk_headers

log = logging.getLogger(__name__)

MAX_RECORD_BYTES = 256 * 1024  # under the broker's 1 MiB default with room for batching
CHUNKS_LOST = "chunks_lost"  # vf-error of a final record whose attempt lost chunks
_ENQUEUE_TIMEOUT_S = 60.0


def attempt_id(attempt: int) -> str:
    return f"{attempt}-{uuid.uuid4().hex[:8]}"


class ChunkPublisher:
    """Opens one ChunkStream per attempt of a streamed request; knows tts.audio's size."""

    def __init__(self, *, producer: Any, topic: str, metrics: WorkerMetrics | None = None,
                 max_backoff_s: float = 5.0, on_fatal: OnFatal | None = None) -> None:
        self.producer = producer
        self.topic = topic
        self.metrics = metrics or WorkerMetrics()
        self.backoff = Backoff(max_s=max_backoff_s)
        self.on_fatal = on_fatal
        self._partitions: set[int] | None = None

    def open(self, *, request_id: str, attempt: int, reply_partition: int | None,
             lane: str = "batch", consumed_at: float | None = None) -> ChunkStream:
        """`consumed_at`: time.monotonic() when the record was taken off its topic."""
        return ChunkStream(self, request_id=request_id, attempt=attempt_id(attempt),
                           reply_partition=reply_partition, lane=lane,
                           consumed_at=consumed_at)

    async def partition_for(self, reply_partition: int | None) -> int | None:
        """The requested partition if tts.audio has it; None (hash the key) otherwise."""
        if reply_partition is None:
            return None
        if self._partitions is None:
            self._partitions = set(await self.producer.partitions_for(self.topic))
        if reply_partition in self._partitions:
            return reply_partition
        log.warning("vf-reply-partition %d is not a partition of %s (%d partitions); "
                    "using the key's", reply_partition, self.topic, len(self._partitions))
        return None


class ChunkStream:
    """The records of one attempt. send() and close() run on the event loop, in order."""

    def __init__(self, publisher: ChunkPublisher, *, request_id: str, attempt: str,
                 reply_partition: int | None, lane: str, consumed_at: float | None) -> None:
        self._pub = publisher
        self.request_id = request_id
        self.attempt = attempt
        self.lane = lane
        self._reply = reply_partition
        self._partition: int | None = None
        self._resolved = False  # _partition looked up (once: a bad one warns once)
        self._consumed_at = consumed_at
        self.seq = 0
        self.sample_rate = 0
        self.closed = False
        self._deliveries: list[asyncio.Future[Any]] = []

    def sink(self, loop: asyncio.AbstractEventLoop,
             cancelled: Callable[[], bool] | None = None) -> ThreadSink:
        return ThreadSink(self, loop, cancelled or (lambda: False))

    async def send(self, pcm: bytes, sample_rate: int) -> None:
        """Chunk records for `pcm`, enqueued in order; raises if the producer refuses."""
        partition = await self._target()
        pieces = [pcm[i:i + MAX_RECORD_BYTES] for i in range(0, len(pcm), MAX_RECORD_BYTES)]
        for piece in pieces:
            headers = chunk_headers(seq=self.seq, attempt=self.attempt,
                                    sample_rate=sample_rate, final=False)
            delivery = await self._pub.producer.send(
                self._pub.topic, piece, key=self.request_id.encode(), partition=partition,
                headers=headers)
            self._deliveries.append(delivery)
            if self.seq == 0 and self._consumed_at is not None:
                self._pub.metrics.on_first_chunk(self.lane, "consumed",
                                                  time.monotonic() - self._consumed_at)
            self.seq += 1
        self.sample_rate = sample_rate
        self._pub.metrics.on_chunks(self.lane, len(pieces))

    async def close(self, status: str, error_code: str | None = None) -> None:
        """The final record, after every chunk of this attempt; returns once acknowledged,
        or once the broker refused it for good (logged). Retries while the broker is
        unreachable, as the result's publisher does."""
        lost = [r for r in await asyncio.gather(*self._deliveries, return_exceptions=True)
                if isinstance(r, BaseException)]
        if lost:
            log.warning("%d of %d chunks were not delivered (%s): the stream ends failed",
                        len(lost), len(self._deliveries), lost[0],
                        extra={"request_id": self.request_id, "attempt": self.attempt})
            status, error_code = "failed", CHUNKS_LOST
        headers = chunk_headers(seq=self.seq, attempt=self.attempt,
                                sample_rate=self.sample_rate, final=True, status=status,
                                error=None if status == "succeeded" else error_code or status)

        async def attempt() -> None:
            partition = await self._target()
            delivery = await self._pub.producer.send(
                self._pub.topic, b"", key=self.request_id.encode(), partition=partition,
                headers=headers)
            await delivery

        try:
            await deliver(attempt, what="final chunk record", backoff=self._pub.backoff,
                          on_fatal=self._pub.on_fatal, ctx={"request_id": self.request_id})
        except Undeliverable as exc:
            log.error("final chunk record refused for good (%s); the stream has no end "
                      "record, its result follows", exc, extra={"request_id": self.request_id})
        self.closed = True

    async def _target(self) -> int | None:
        if not self._resolved:
            self._partition = await self._pub.partition_for(self._reply)
            self._resolved = True
        return self._partition


class ThreadSink:
    """pipeline.streaming's ChunkSink for a processing thread: each chunk is handed to the
    event loop, and the thread waits until it is enqueued (not acknowledged), which keeps
    the records in order and the producer's buffer bounded."""

    def __init__(self, stream: ChunkStream, loop: asyncio.AbstractEventLoop,
                 cancelled: Callable[[], bool]) -> None:
        self._stream = stream
        self._loop = loop
        self._cancelled = cancelled

    def chunk(self, pcm: bytes, sample_rate: int) -> None:
        future = asyncio.run_coroutine_threadsafe(self._stream.send(pcm, sample_rate),
                                                  self._loop)
        future.result(timeout=_ENQUEUE_TIMEOUT_S)

    def cancelled(self) -> bool:
        return self._cancelled()
