"""The synthesis worker: `tts.requests` -> audio objects + `tts.results`, then commit.

    fetch loop ──decode──> DLQ / rejected ─────────────────────────┐
        │  valid                                                   │
        v                                                          v
    VoiceBatcher (bounded; full -> pause partitions)          Publisher (acks=all)
        │ same-voice batches                                       │
        v                                                          v
    2 x max_inflight dispatch tasks -> processor.process_batch OffsetTracker.done
        (in threads; max_inflight of them in the engine at once)   │
                        retryable -> backoff -> back in queue      │
                                                                   v
                                             commit loop: contiguous offsets per partition

A record's offset becomes committable only after its answer is acknowledged, and only once
every earlier record of its partition is too. A crash before that redelivers the record; the
object store answers it without a second synthesis.
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from consumers.health import HealthServer, Heartbeat
from consumers.kafka import assignors, make_consumer, make_producer
from consumers.metrics import WorkerMetrics
from consumers.worker.batching import BatcherClosed, VoiceBatcher
from consumers.worker.offsets import OffsetTracker
from consumers.worker.publisher import Publisher, dead_letter
from consumers.worker.rebalance import RevocationListener
from pipeline.synthesis import Received, RequestProcessor
from topics.config import Settings
from topics.errors import ErrorCode, InvalidRequest, UndecodableMessage, VoiceFactoryError
from topics.events import SynthesisRequest, SynthesisResult
from topics.specs import topic_names
from topics.validation import decode_request

log = logging.getLogger(__name__)


@dataclass
class Job:
    record: ConsumerRecord[bytes, bytes]
    tp: TopicPartition
    request: SynthesisRequest
    stamp: datetime
    attempt: int = 1
    first_failure: float | None = None  # monotonic time of the first retryable failure

    def ctx(self) -> dict[str, Any]:
        return {"partition": self.tp.partition, "offset": self.record.offset,
                "request_id": self.request.request_id, "voice_id": self.request.voice_id}


class SynthesisWorker:
    def __init__(self, *, settings: Settings, processor: RequestProcessor,
                 metrics: WorkerMetrics | None = None, retry_base_s: float = 0.5,
                 commit_interval_s: float = 0.5) -> None:
        self._settings = settings
        self._processor = processor
        self._names = topic_names(settings.topic_prefix)
        self.metrics = metrics or WorkerMetrics()
        self._retry_base_s = retry_base_s
        self._commit_interval_s = commit_interval_s
        self.tracker = OffsetTracker()
        self.batcher: VoiceBatcher[Job] = VoiceBatcher(
            max_batch=settings.max_batch, batch_wait_s=settings.batch_wait_ms / 1000,
            capacity=settings.queue_capacity,
            idle=lambda: self._active_batches < settings.max_inflight)
        self.heartbeat = Heartbeat()
        self.revoked: set[TopicPartition] = set()
        self.inflight_by_tp: dict[TopicPartition, int] = {}
        self._stopping = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._consumer: Any = None
        self._publisher: Publisher | None = None
        self._active_batches = 0
        self._last_broker_ok = 0.0
        self.health: HealthServer | None = None
        self.processed = 0
        self.waiting_retry = 0

    # -- lifecycle ---------------------------------------------------------------------

    def stop(self) -> None:
        self._stopping.set()

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        if self._stopping.is_set():
            log.warning("second %s: exiting at once without draining", sig.name)
            raise SystemExit(1)
        log.info("%s received: draining in-flight work (up to %.0f s), then committing",
                 sig.name, self._settings.drain_seconds)
        self._stopping.set()

    async def run(self) -> None:
        s = self._settings
        consumer = make_consumer(
            s, group_id=s.group_id, enable_auto_commit=False, auto_offset_reset="earliest",
            group_instance_id=s.instance_id or None, session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=min(3000, s.session_timeout_ms // 3),
            max_poll_interval_ms=600_000, partition_assignment_strategy=assignors(s.assignor))
        consumer.subscribe([self._names.requests], listener=RevocationListener(self))
        producer = make_producer(s, linger_ms=2)
        await producer.start()
        await consumer.start()
        self._consumer = consumer
        self._publisher = Publisher(producer=producer, names=self._names)
        if s.metrics_port >= 0:
            self.health = HealthServer(host=s.metrics_host, port=s.metrics_port,
                                       metrics=self.metrics, liveness=self._liveness,
                                       readiness=self._readiness)
            await self.health.start()
        log.info("worker %s consuming %s as group %s (max_inflight %d, max_batch %d)",
                 s.instance_id, self._names.requests, s.group_id, s.max_inflight, s.max_batch)
        loops = [asyncio.create_task(self._fetch_loop(), name="fetch"),
                 asyncio.create_task(self._commit_loop(), name="commit")]
        # Twice max_inflight dispatchers: the processor lets max_inflight of them into the
        # engine at once, the others store finished outputs meanwhile (measured: batching
        # gain and capacity, docs/benchmarks.md).
        dispatchers = [asyncio.create_task(self._dispatch_loop(), name=f"dispatch-{i}")
                       for i in range(2 * s.max_inflight)]
        try:
            await self._stopping.wait()
        finally:
            await self._drain(loops, dispatchers)
            await consumer.stop()
            await producer.stop()
            if self.health is not None:
                await self.health.stop()
            log.info("worker stopped after %d requests", self.processed)

    async def _drain(self, loops: list[asyncio.Task[None]],
                     dispatchers: list[asyncio.Task[None]]) -> None:
        """Stop fetching -> finish queued and in-flight batches -> publish -> commit."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._settings.drain_seconds
        loops[0].cancel()
        self.batcher.close()  # dispatchers hand out what is queued, then exit
        await asyncio.wait(dispatchers, timeout=self._settings.drain_seconds)
        # Dispatchers spawn the publishing tasks; wait for those (and any they spawn) too.
        while self._tasks and loop.time() < deadline:
            await asyncio.wait(set(self._tasks), timeout=deadline - loop.time())
        late = [t for t in [*dispatchers, *self._tasks] if not t.done()]
        for task in late:
            task.cancel()
        if late:
            log.warning("drain: %d tasks unfinished after %.0f s, left to the next owner",
                        len(late), self._settings.drain_seconds)
        loops[1].cancel()
        await asyncio.gather(*loops, *late, return_exceptions=True)
        await self.commit()

    # -- fetching ----------------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        consumer = self._consumer
        while True:
            self.heartbeat.beat()
            # Requests waiting to be retried count too: a store outage must not turn into
            # an unbounded pile of retry timers.
            queued = self.batcher.qsize() + self.waiting_retry
            full = queued >= self._settings.queue_capacity
            assigned = consumer.assignment()
            if full:
                consumer.pause(*assigned)
            elif consumer.paused():
                consumer.resume(*consumer.paused())
            self.metrics.set_paused(len(consumer.paused()))
            room = max(1, self._settings.queue_capacity - queued)
            try:
                batches = await consumer.getmany(timeout_ms=200, max_records=room)
            except KafkaError as exc:
                log.warning("fetch failed: %s", exc)
                await asyncio.sleep(0.5)
                continue
            self._last_broker_ok = time.monotonic()
            for tp, records in batches.items():
                if tp in self.revoked:
                    continue
                for rec in records:
                    self._accept(tp, rec)
            self.metrics.set_queue_depth(self.batcher.qsize())

    def _accept(self, tp: TopicPartition, rec: ConsumerRecord[bytes, bytes]) -> None:
        self.tracker.add(tp, rec.offset)
        self.metrics.on_request_in()
        ctx = {"partition": rec.partition, "offset": rec.offset}
        try:
            request = decode_request(rec.value)
        except UndecodableMessage as exc:
            log.warning("undecodable message to the DLQ: %s", exc.message, extra=ctx)
            self.metrics.on_dlq(exc.code.value)
            self._spawn(self._answer(tp, rec, dlq=dead_letter(rec, str(exc))))
            return
        except InvalidRequest as exc:
            log.info("rejected: %s", exc, extra={**ctx, "request_id": exc.request_id,
                                                 "voice_id": exc.voice_id})
            if exc.request_id is None:  # nobody to answer: keep the bytes in the DLQ
                self.metrics.on_dlq(exc.code.value)
                self._spawn(self._answer(tp, rec, dlq=dead_letter(rec, str(exc))))
                return
            result = self._processor.rejected(exc.request_id, exc.voice_id, exc.code,
                                              exc.message)
            self._spawn(self._answer(tp, rec, result=result))
            return
        stamp = datetime.fromtimestamp(rec.timestamp / 1000, UTC)
        self._enqueue(Job(rec, tp, request, stamp))

    def _enqueue(self, job: Job) -> None:
        self.inflight_by_tp[job.tp] = self.inflight_by_tp.get(job.tp, 0) + 1
        self.batcher.put(job.request.voice_id, job)

    # -- synthesis ---------------------------------------------------------------------

    async def _dispatch_loop(self) -> None:
        while True:
            try:
                _voice, jobs = await self.batcher.next_batch()
            except BatcherClosed:
                return
            jobs = [j for j in jobs if self._owned(j)]
            if jobs:
                await self._run_batch(jobs)

    async def _run_batch(self, jobs: list[Job]) -> None:
        now_ms = time.time() * 1000
        items = [(j.request, Received(timestamp=j.stamp, attempt=j.attempt,
                                      queued_ms=max(0.0, now_ms - j.record.timestamp)))
                 for j in jobs]
        self._active_batches += 1
        self.metrics.set_inflight(self._active_batches)
        started = time.perf_counter()
        try:
            outcomes = await asyncio.to_thread(self._processor.process_batch, items)
        except Exception as exc:  # a bug must not block partitions: answer each as failed
            log.exception("batch of %d crashed", len(jobs))
            outcomes = [VoiceFactoryError(ErrorCode.ENGINE_ERROR, f"internal error: {exc!r}",
                                          retryable=True) for _ in jobs]
        finally:
            self._active_batches -= 1
            self.metrics.set_inflight(self._active_batches)
        self.metrics.on_batch_done(len(jobs), time.perf_counter() - started)
        for job, outcome in zip(jobs, outcomes, strict=True):
            if isinstance(outcome, SynthesisResult):
                self._finish(job, outcome)
            elif not self._give_up(job, outcome):
                self._retry_later(job, outcome)
            else:
                log.error("failed after %d attempts: %s", job.attempt, outcome, extra=job.ctx())
                failed = self._processor.rejected(
                    job.request.request_id, job.request.voice_id, outcome.code, outcome.message,
                    request=job.request, attempt=job.attempt, status="failed", retryable=True)
                self.metrics.on_dlq(outcome.code.value)
                self._finish(job, failed, dlq=dead_letter(job.record, str(outcome)))

    def _give_up(self, job: Job, error: VoiceFactoryError) -> bool:
        """Engine errors get `max_attempts`; a store outage is everyone's problem, not this
        request's, so storage errors retry for `storage_retry_seconds` instead."""
        now = time.monotonic()
        if job.first_failure is None:
            job.first_failure = now
        if error.code is ErrorCode.STORAGE_ERROR:
            return now - job.first_failure >= self._settings.storage_retry_seconds
        return job.attempt >= self._settings.max_attempts

    def _retry_later(self, job: Job, error: VoiceFactoryError) -> None:
        exp = min(self._retry_base_s * 2 ** (job.attempt - 1), self._settings.retry_max_delay_s)
        delay = exp * random.uniform(0.5, 1.5)  # noqa: S311 - jitter, not crypto
        log.warning("attempt %d failed (%s), retrying in %.2f s", job.attempt, error, delay,
                    extra=job.ctx())
        self.metrics.on_retry(error.code.value)

        async def later() -> None:
            self.waiting_retry += 1
            try:
                await asyncio.sleep(delay)
            finally:
                self.waiting_retry -= 1
            job.attempt += 1
            if self._owned(job) and not self._stopping.is_set():
                self.batcher.put(job.request.voice_id, job)
            else:  # revoked or shutting down: the next owner redelivers it
                self._release(job.tp)

        self._spawn(later())

    def _finish(self, job: Job, result: SynthesisResult, dlq: Any = None) -> None:
        code = result.error.code if result.error else None
        log.info("%s in %.0f ms", result.status, result.timings_ms.get("total", 0),
                 extra={**job.ctx(), "stage": "done"})
        self.metrics.on_result(result.status, code)
        self.metrics.observe_stages(result.timings_ms)
        if result.rtf:
            self.metrics.observe_rtf(result.rtf)

        async def publish() -> None:
            try:
                await self._answer(job.tp, job.record, result=result, dlq=dlq)
            finally:
                self._release(job.tp)

        self._spawn(publish())

    async def _answer(self, tp: TopicPartition, rec: ConsumerRecord[bytes, bytes], *,
                      result: SynthesisResult | None = None, dlq: Any = None) -> None:
        assert self._publisher is not None
        await self._publisher.publish(rec, result=result, dlq=dlq)
        self.processed += 1
        # Also while a revocation waits for in-flight work (that commit needs these); a no-op
        # once the partition is forgotten.
        self.tracker.done(tp, rec.offset)

    def _release(self, tp: TopicPartition) -> None:
        left = self.inflight_by_tp.get(tp, 0) - 1
        if left > 0:
            self.inflight_by_tp[tp] = left
        else:
            self.inflight_by_tp.pop(tp, None)

    def _owned(self, job: Job) -> bool:
        if job.tp in self.revoked:
            self._release(job.tp)
            return False
        return True

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- commits, lag, health ----------------------------------------------------------

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self._commit_interval_s)
            await self.commit()
            self._update_lag()

    async def commit(self, only: set[TopicPartition] | None = None) -> None:
        candidates = self.tracker.committable()
        offsets = ({tp: off for tp, off in candidates.items() if tp in only} if only is not None
                   else {tp: off for tp, off in candidates.items() if tp not in self.revoked})
        if not offsets or self._consumer is None:
            return
        try:
            await self._consumer.commit(offsets)
        except (CommitFailedError, IllegalStateError) as exc:
            # The group moved on: the new owner redelivers these and answers them from the store.
            log.warning("commit of %d partitions failed after a rebalance: %s", len(offsets), exc)
            return
        except KafkaError as exc:
            log.warning("commit failed (%s); will retry", exc)
            return
        self._last_broker_ok = time.monotonic()
        self.tracker.mark_committed(offsets)
        self.metrics.on_commit(len(offsets))

    def _update_lag(self) -> None:
        consumer = self._consumer
        for tp in consumer.assignment():
            high = consumer.highwater(tp)
            if high is None:
                continue
            done = self.tracker.committed(tp)
            if done is None:
                continue
            self.metrics.set_lag(tp.topic, tp.partition, max(0, high - done))

    def _liveness(self) -> tuple[bool, dict[str, object]]:
        alive = self.heartbeat.alive(30.0)
        return alive, {"event_loop": True, "fetch_loop_heartbeat_age_s": round(
            self.heartbeat.age(), 2)}

    async def _readiness(self) -> tuple[bool, dict[str, object]]:
        store_ok = await asyncio.to_thread(self._processor.store_reachable)
        checks: dict[str, object] = {
            "engine_loaded": True,
            "broker": time.monotonic() - self._last_broker_ok < 30.0,
            "store": store_ok,
            "assignment": bool(self._consumer and self._consumer.assignment()),
            "draining": self._stopping.is_set(),
        }
        ready = all(checks[k] for k in ("engine_loaded", "broker", "store", "assignment"))
        return ready and not self._stopping.is_set(), checks

