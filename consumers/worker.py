"""The synthesis worker: `tts.requests` -> audio objects + `tts.results`, then commit.

fetch a bounded batch (getmany) -> per record, concurrently up to `max_inflight`:
decode -> (DLQ | rejected result | processor.process in a thread, with retries) ->
produce every result and DLQ record and wait for the broker's acks -> commit the batch's
offsets. A failure before the commit leaves the offsets uncommitted, so the records are
redelivered and answered from the stored objects (idempotent keys), never lost.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import random
import signal
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError

from consumers.kafka import make_consumer, make_producer
from consumers.tracing import child_traceparent
from pipeline.synthesis import Received, RequestProcessor, now_iso
from topics.config import Settings
from topics.errors import ErrorCode, InvalidRequest, UndecodableMessage, VoiceFactoryError
from topics.events import DeadLetter, SynthesisResult, encode
from topics.specs import topic_names
from topics.validation import decode_request

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    record: ConsumerRecord[bytes, bytes]
    result: SynthesisResult | None = None
    dead_letter: DeadLetter | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class SynthesisWorker:
    def __init__(self, *, settings: Settings, processor: RequestProcessor, max_attempts: int = 3,
                 retry_base_s: float = 0.5, drain_seconds: float = 30.0) -> None:
        self._settings = settings
        self._processor = processor
        self._names = topic_names(settings.topic_prefix)
        self._max_attempts = max_attempts
        self._retry_base_s = retry_base_s
        self._drain_seconds = drain_seconds
        self._inflight = asyncio.Semaphore(settings.max_inflight)
        self._stopping = asyncio.Event()
        self.processed = 0

    def stop(self) -> None:
        self._stopping.set()

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        if self._stopping.is_set():
            log.warning("second %s: exiting at once", sig.name)
            raise SystemExit(1)
        log.info("%s received: finishing in-flight work, then committing and leaving the group",
                 sig.name)
        self._stopping.set()

    async def run(self) -> None:
        consumer = make_consumer(
            self._settings, self._names.requests, group_id=self._settings.group_id,
            enable_auto_commit=False, auto_offset_reset="earliest",
            max_poll_interval_ms=600_000, session_timeout_ms=30_000)
        producer = make_producer(self._settings, linger_ms=5)
        await producer.start()
        await consumer.start()
        log.info("worker %s consuming %s as group %s", self._settings.instance_id,
                 self._names.requests, self._settings.group_id)
        try:
            while not self._stopping.is_set():
                batches = await consumer.getmany(timeout_ms=500,
                                                 max_records=self._settings.max_inflight * 4)
                records = [r for rs in batches.values() for r in rs]
                if records:
                    await self._handle(records, consumer, producer)
        finally:
            await consumer.stop()  # leaves the group so partitions move at once
            await producer.stop()
            log.info("worker stopped after %d requests", self.processed)

    async def _handle(self, records: list[ConsumerRecord[bytes, bytes]], consumer: Any,
                      producer: Any) -> None:
        outcomes = await asyncio.gather(*(self._guarded(r) for r in records))
        sends = []
        for outcome in outcomes:
            rec = outcome.record
            headers = [("traceparent", child_traceparent(rec.headers).encode())]
            if outcome.result is not None:
                sends.append(await producer.send(
                    self._names.results, encode(outcome.result),
                    key=outcome.result.result_key(), headers=headers))
            if outcome.dead_letter is not None:
                sends.append(await producer.send(
                    self._names.dlq, encode(outcome.dead_letter), key=rec.key,
                    headers=[*rec.headers, ("vf-reason", outcome.dead_letter.reason.encode())]))
        await asyncio.gather(*sends)  # every result acknowledged before any offset moves
        offsets: dict[TopicPartition, int] = {}
        for rec in records:
            tp = TopicPartition(rec.topic, rec.partition)
            offsets[tp] = max(offsets.get(tp, 0), rec.offset + 1)
        try:
            await consumer.commit(offsets)
        except (CommitFailedError, IllegalStateError) as exc:
            # Partitions moved meanwhile: the new owner answers these from the stored objects.
            log.warning("commit of %s failed after rebalance: %s", offsets, exc)
        self.processed += len(records)

    async def _guarded(self, rec: ConsumerRecord[bytes, bytes]) -> Outcome:
        async with self._inflight:
            try:
                return await self._one(rec)
            except Exception as exc:  # a bug must not block the partition: dead-letter it
                log.exception("unexpected failure on %s[%d]@%d", rec.topic, rec.partition,
                              rec.offset)
                return Outcome(rec, dead_letter=dead_letter(rec, f"internal error: {exc!r}"))

    async def _one(self, rec: ConsumerRecord[bytes, bytes]) -> Outcome:
        ctx = {"partition": rec.partition, "offset": rec.offset}
        try:
            request = decode_request(rec.value)
        except UndecodableMessage as exc:
            log.warning("undecodable message to DLQ: %s", exc.message, extra=ctx)
            return Outcome(rec, dead_letter=dead_letter(rec, str(exc)))
        except InvalidRequest as exc:
            log.info("rejected: %s", exc, extra={**ctx, "request_id": exc.request_id,
                                                 "voice_id": exc.voice_id})
            if exc.request_id is None:
                return Outcome(rec, dead_letter=dead_letter(rec, str(exc)))
            return Outcome(rec, result=self._processor.rejected(exc.request_id, exc.voice_id,
                                                                exc.code, exc.message))
        ctx.update(request_id=request.request_id, voice_id=request.voice_id)
        stamp = datetime.fromtimestamp(rec.timestamp / 1000, UTC)
        queued_ms = max(0.0, datetime.now(UTC).timestamp() * 1000 - rec.timestamp)
        for attempt in range(1, self._max_attempts + 1):
            received = Received(timestamp=stamp, queued_ms=queued_ms, attempt=attempt)
            try:
                result = await asyncio.to_thread(self._processor.process, request, received)
            except VoiceFactoryError as exc:
                if attempt == self._max_attempts:
                    log.error("failed after %d attempts: %s", attempt, exc, extra=ctx)
                    failed = self._processor.rejected(
                        request.request_id, request.voice_id, exc.code, exc.message,
                        request=request, attempt=attempt, status="failed", retryable=True)
                    return Outcome(rec, result=failed, dead_letter=dead_letter(rec, str(exc)))
                delay = self._retry_base_s * 2 ** (attempt - 1) * random.uniform(0.5, 1.5)  # noqa: S311
                log.warning("attempt %d failed (%s), retrying in %.2f s", attempt, exc, delay,
                            extra=ctx)
                await asyncio.sleep(delay)
                continue
            log.info("%s in %.0f ms", result.status, result.timings_ms.get("total", 0),
                     extra={**ctx, "stage": "done"})
            return Outcome(rec, result=result)
        raise AssertionError("unreachable")


def dead_letter(rec: ConsumerRecord[bytes, bytes], reason: str) -> DeadLetter:
    return DeadLetter(
        topic=rec.topic, partition=rec.partition, offset=rec.offset, reason=reason,
        failed_at=now_iso(),
        key_b64=base64.b64encode(rec.key).decode() if rec.key is not None else None,
        value_b64=base64.b64encode(rec.value or b"").decode(),
        headers=[(k, base64.b64encode(v).decode()) for k, v in rec.headers])


__all__ = ["ErrorCode", "SynthesisWorker", "dead_letter"]
