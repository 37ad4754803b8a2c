"""The synthesis worker's answer path: a batch off the queue -> the engine -> an answer.

    VoiceBatcher.next_batch(lane) (batching.py) -> a dispatch task (_dispatch_loop; the
        worker starts 2 x max_inflight, + max_inflight interactive, shape.py)
        │ revoked meanwhile (_owned) -> given back; a cancel names it -> `cancelled`
        v
    streamed request: StreamRunner.run (streams.py), alone
    the rest: processor.process_batch in a batch thread (gate.py: the lane's device slot);
        step 1: the processor stores each output (pipeline/); a crash -> each `engine_error`
        │
        v
    _settle, per request:
        result -> _finish
        retryable error, RetryPolicy (retry.py) not given up -> _retry_later: a backoff
            timer (Checkpoint.waiting_retry), then back in the batcher (or given back when
            revoked or stopping)
        given up -> a failed result + DLQ record -> _finish
    _finish: metrics -> Checkpoint.answer (steps 2-3: published, acknowledged, offset done),
        or, for a stream, StreamRunner.answer (its final chunk record first)

SynthesisWorker (loop.py) mixes this in and owns every attribute declared here; `_spawn`
(loop.py) runs each answer and retry timer as a task the drain can cancel.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from consumers.metrics import WorkerMetrics
from consumers.worker import lanes
from consumers.worker.batching import BatcherClosed, Lane, VoiceBatcher
from consumers.worker.cancellation import CancelRegistry, QueueCanceller
from consumers.worker.checkpoint import Checkpoint
from consumers.worker.gate import BatchThreads
from consumers.worker.inflight import InFlightRequest
from consumers.worker.publisher import dead_letter
from consumers.worker.retry import RetryPolicy
from consumers.worker.streams import StreamRunner, queue_key
from pipeline.synthesis import Outcome, RequestProcessor
from topics.errors import ErrorCode, VoiceFactoryError
from topics.events import DeadLetter, SynthesisResult

log = logging.getLogger(__name__)


class WorkerDispatch:
    _processor: RequestProcessor
    _threads: BatchThreads
    _canceller: QueueCanceller
    _stopping: asyncio.Event
    _running_batches: int
    _spawn: Callable[[Coroutine[Any, Any, None], Mapping[str, Any] | None], None]
    metrics: WorkerMetrics
    retry: RetryPolicy
    batcher: VoiceBatcher[InFlightRequest]
    cancels: CancelRegistry
    checkpoint: Checkpoint | None
    streams: StreamRunner | None

    @property
    def _cp(self) -> Checkpoint:
        assert self.checkpoint is not None, "the checkpoint exists once run() started"
        return self.checkpoint

    async def _dispatch_loop(self, lane: Lane | None = None) -> None:
        while True:
            try:
                _voice, reqs = await self.batcher.next_batch(lane)
            except BatcherClosed:
                return
            lanes.observe_waits(self.metrics, reqs)
            reqs = [r for r in reqs if self._owned(r) and not self._canceller.cancel_if_named(r)]
            # A streamed request has a queue of its own (queue_key), shared only by copies
            # of itself (a failover's re-send): each copy streams, never batched, or its
            # final record would come with no chunks before it.
            for req in [r for r in reqs if r.request.stream]:
                await self._run_stream(req)
            if batch := [r for r in reqs if not r.request.stream]:
                await self._run_batch(batch)

    async def _run_stream(self, req: InFlightRequest) -> None:
        assert self.streams is not None, "built in run()"
        self._running_batches += 1  # device work, as a batch is: the batcher's idle()
        try:
            outcome = await self.streams.run(req)
        finally:
            self._running_batches -= 1
            self.batcher.poke()
        self._settle(req, outcome)

    async def _run_batch(self, reqs: list[InFlightRequest]) -> None:
        def process() -> list[Outcome]:  # in a batch thread, holding its lane's slot if any
            return self._processor.process_batch(
                [r.received(self.cancels.checker(r.request_id, r.job_id, r.request.tenant))
                 for r in reqs])

        self._running_batches += 1
        self.metrics.set_inflight(self._running_batches)
        started = time.perf_counter()
        try:  # step 1 happens in there: the processor stores each output before answering
            outcomes = await self._threads.run(reqs[0].lane, process)
        except Exception as exc:  # a bug must not block partitions: answer each as failed
            log.exception("batch of %d crashed", len(reqs))
            outcomes = [VoiceFactoryError(ErrorCode.ENGINE_ERROR, f"internal error: {exc!r}",
                                          retryable=True) for _ in reqs]
        finally:
            self._running_batches -= 1
            self.metrics.set_inflight(self._running_batches)
            self.batcher.poke()  # idle() may say yes now
        self.metrics.on_batch_done(len(reqs), time.perf_counter() - started)
        for req, outcome in zip(reqs, outcomes, strict=True):
            self._settle(req, outcome)

    def _settle(self, req: InFlightRequest, outcome: SynthesisResult | VoiceFactoryError) -> None:
        if isinstance(outcome, SynthesisResult):
            self._finish(req, outcome)
        elif not self._give_up(req, outcome):
            self._retry_later(req, outcome)
        else:
            log.error("failed after %d attempts: %s", req.attempt, outcome, extra=req.ctx())
            failed = self._processor.answers.failed(req.request, outcome, req.attempt)
            self.metrics.on_dlq(outcome.code.value)
            self._finish(req, failed, dlq=dead_letter(req.record, str(outcome)))

    def _give_up(self, req: InFlightRequest, error: VoiceFactoryError) -> bool:
        now = time.monotonic()
        if req.first_failure is None:
            req.first_failure = now
        return self.retry.give_up(error.code, attempt=req.attempt,
                                  failing_for_s=now - req.first_failure)

    def _retry_later(self, req: InFlightRequest, error: VoiceFactoryError) -> None:
        delay = self.retry.delay(req.attempt)
        log.warning("attempt %d failed (%s), retrying in %.2f s", req.attempt, error, delay,
                    extra=req.ctx())
        self.metrics.on_retry(error.code.value)

        async def later() -> None:
            cp = self._cp
            try:
                with cp.waiting_retry():
                    await asyncio.sleep(delay)
            except asyncio.CancelledError:
                cp.abandon(req.tp, req.record.offset)
                raise
            req.attempt += 1
            if not self._owned(req):  # revoked meanwhile: given back to the next owner
                return
            if self._stopping.is_set():  # shutting down: the next start redelivers it
                cp.abandon(req.tp, req.record.offset)
                return
            if not self._canceller.cancel_if_named(req):
                req.queued_at = time.monotonic()
                self.batcher.put(queue_key(req.request), req, req.lane)

        self._spawn(later(), req.ctx())

    def _finish(self, req: InFlightRequest, result: SynthesisResult,
                dlq: DeadLetter | None = None) -> None:
        code = result.error.code if result.error else None
        log.info("%s in %.0f ms", result.status, result.timings_ms.get("total", 0),
                 extra={**req.ctx(), "stage": "done"})
        self.metrics.on_result(result.status, code)
        self.metrics.on_lane_result(req.lane, result.status)
        self.metrics.observe_stages(result.timings_ms)
        if result.rtf:
            self.metrics.observe_rtf(result.rtf)
        if req.request.stream and self.streams is not None:  # the final chunk record first
            self._spawn(self.streams.answer(req.tp, req.record, result=result, dlq=dlq,
                                            stream=req.stream), req.ctx())
            return
        self._spawn(self._cp.answer(req.tp, req.record, result=result, dlq=dlq),  # steps 2-3
                    req.ctx())

    def _owned(self, req: InFlightRequest) -> bool:
        """False (and the record given back) once its partition is revoked."""
        if self._cp.owns(req.tp):
            return True
        self._cp.abandon(req.tp, req.record.offset)
        return False
