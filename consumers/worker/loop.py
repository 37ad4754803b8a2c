"""The synthesis worker: `tts.requests[.interactive]` -> audio objects + `tts.results`.

    fetch loop (here): step 0, Checkpoint.begin (offset pending, record in flight)
        │ unreadable by aiokafka (unreadable.py) ──> DLQ record ──────────────┐
        │ undecodable / invalid ──> DLQ record / rejected result ─────────────┤
        │ cancelled (cancellation.py) ──> cancelled result ───────────────────┤
        │ valid: InFlightRequest (inflight.py), lane from its topic           │
        │ plain-keyed overflow (spill.py) ──> another worker's shard partition, acknowledged,
        │     offset done (that worker answers)                               │
        v                                                                     │
    VoiceBatcher (batching.py: interactive first; per-lane pauses: lanes.py)  │
        │ same-voice batches                                                  │
        v                                                                     │
    dispatch tasks (shape.py: 2 x max_inflight, + max_inflight interactive)   │
        (dispatch.py) -> processor.process_batch in threads (gate.py: device  │
        slots by lane, max_inflight + interactive_slots calls at once);       │
        step 1: the processor stores each output (pipeline/)                  │
        │ retryable error: RetryPolicy (retry.py) -> backoff -> back in queue │
        │ result, or a failed result + DLQ record once the policy gives up    │
        v                                                                     v
    Checkpoint.answer (checkpoint.py): step 2, Publisher (publisher.py) sends and waits
        for acks=all -> step 3, offset done (OffsetTracker, offsets.py); a record the
        broker can never take gets a smaller answer (deadletters.py), a fatal producer
        error (errors.py) -> _on_fatal: /readyz drops, stop, run() raises (exit 1)
    ("stream": true: each on its own through StreamRunner (streams.py), chunks to
    tts.audio as they come, the final chunk record acknowledged before step 2)
        │
        v
    commit loop (every 0.5 s, sooner after a burst of answers): step 4, Checkpoint.commit:
        contiguous done offsets per partition -> consumer.commit; then Checkpoint.update_lag
        (lag.py: lag from the group's committed offsets, partitions whose commits are stuck)
    revocation (rebalance.py): Checkpoint.revoke -> batcher.drop -> Checkpoint.wait_idle
        -> Checkpoint.commit -> Checkpoint.forget
    control loop (cancellation.py): tts.control -> CancelRegistry -> queued requests of the
        cancelled request or job leave the batcher and are answered `cancelled` (steps 2-3)
    fleet loop (fleet.py): this worker's partitions, load and hot voices -> tts.fleet; the
        fleet view (consumers/fleet/view.py) read back, for spill.py
    start-up (run): health server -> engine warm-up -> producer -> control reader ->
        check_topics -> group consumer -> the loops; each part's stop goes on one exit stack as it
        starts (consumers/startup.py), unwound in reverse at shutdown or when a step fails

A record's offset becomes committable only after its answer is acknowledged, and only once
every earlier record of its partition is too. A crash before that redelivers the record; the
object store answers it without a second synthesis. In-flight bookkeeping (pending offsets,
records in flight per partition, records waiting to retry, revoked partitions) lives in the
Checkpoint; the worker keeps only its task handles and the number of batches in the engine
(counted by dispatch.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError

from consumers import kafka_access, startup
from consumers.fleet.router import FleetRouter, Route
from consumers.fleet.view import FleetView
from consumers.health import HealthServer, Heartbeat
from consumers.kafka import make_consumer, make_producer
from consumers.metrics import WorkerMetrics
from consumers.settings import Settings, process_name
from consumers.worker import lanes
from consumers.worker.batching import VoiceBatcher
from consumers.worker.cancellation import CancelRegistry, ControlReader, QueueCanceller
from consumers.worker.checkpoint import Checkpoint
from consumers.worker.chunks import ChunkPublisher
from consumers.worker.deadletters import unreadable_letter
from consumers.worker.dispatch import WorkerDispatch
from consumers.worker.errors import FatalPublishError
from consumers.worker.fleet import StatusReporter
from consumers.worker.gate import BatchThreads, LaneGate
from consumers.worker.inflight import InFlightRequest
from consumers.worker.lifecycle import WorkerLifecycle
from consumers.worker.publisher import Publisher, dead_letter
from consumers.worker.rebalance import RevocationListener
from consumers.worker.retry import RetryPolicy
from consumers.worker.shape import WorkerShape
from consumers.worker.spill import Spill
from consumers.worker.streams import StreamRunner, mixable, queue_key, wants_stream
from consumers.worker.unreadable import UnreadableRecords
from pipeline.storage import ObjectStore
from pipeline.synthesis import RequestProcessor
from topics.errors import ErrorCode, InvalidRequest, UndecodableMessage
from topics.specs import REQUESTS, topic_names
from topics.validation import decode_request

log = logging.getLogger(__name__)

_CANCEL_WAIT_S = 10.0  # the drain's wait for its cancelled loops and late tasks to end
_FINAL_COMMIT_S = 10.0  # the drain's last commit, at most


class SynthesisWorker(WorkerDispatch, WorkerLifecycle):
    def __init__(self, *, settings: Settings, processor: RequestProcessor,
                 metrics: WorkerMetrics | None = None, retry_base_s: float = 0.5,
                 commit_interval_s: float = 0.5, device_gate: LaneGate | None = None,
                 engine_ready: Callable[[], bool] | None = None,
                 warm_up: Callable[[], None] | None = None,
                 hot_voices: Callable[[], list[str]] = list,
                 store: ObjectStore | None = None, name: str | None = None) -> None:
        s = settings.worker
        self._settings = settings
        # Its name in tts.fleet, spilled records and logs: VF_INSTANCE_ID, or a dynamic
        # member's own (an empty VF_INSTANCE_ID), without which routers would skip its status.
        self.name = name or process_name(s.instance_id)
        self._processor = processor
        # Dispatchers, device slots and threads, derived once (shape.py); a gate made for
        # another shape would run a different number of device calls than the docs promise.
        self.shape = WorkerShape.of(s)
        if device_gate is not None and device_gate.capacity != self.shape.device_calls:
            raise ValueError(f"device gate runs {device_gate.capacity} calls at once, the "
                             f"worker's shape {self.shape.device_calls}")
        self._threads = BatchThreads(device_gate, self.shape.threads)
        self._names = topic_names(settings.kafka.topic_prefix)
        self.metrics = metrics or WorkerMetrics()
        # Without a loader the processor's engine came loaded; with one (`warm_up`, run in a
        # thread by run() once /healthz answers), `engine_ready` says when it is done.
        self._engine_ready = engine_ready or (lambda: True)
        self._warm_up = warm_up
        self._warming = False
        self._hot_voices = hot_voices
        self._store = store  # keeps the values of dead letters too big to carry inline
        self.fatal: KafkaError | None = None  # the producer's fatal error, once it came
        self._commit_interval_s = commit_interval_s
        self.retry = RetryPolicy(max_attempts=s.max_attempts,
                                 storage_retry_s=s.storage_retry_seconds,
                                 base_delay_s=retry_base_s, max_delay_s=s.retry_max_delay_s)
        self._gate = device_gate
        self._mixing = processor.mixes_voices  # one engine call may hold several voices
        self.batcher: VoiceBatcher[InFlightRequest] = VoiceBatcher(
            max_batch=s.max_batch, batch_wait_s=s.batch_wait_ms / 1000,
            capacity=s.queue_capacity, idle=self._device_idle,
            batch_share=s.batch_min_share,
            mixable=mixable if self._mixing else None)
        self.cancels = CancelRegistry(ttl_s=s.cancel_ttl_s, max_entries=s.cancel_max_entries)
        self._canceller = QueueCanceller(registry=self.cancels, batcher=self.batcher,
                                         answers=lambda: processor.answers, finish=self._finish)
        self.heartbeat = Heartbeat()
        self.checkpoint: Checkpoint | None = None  # built in run(), around the Kafka clients
        self.streams: StreamRunner | None = None  # likewise
        self._stopping = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()  # handles only, to cancel at the drain
        self._consumer: Any = None
        self._running_batches = 0
        self._last_fetch_ok = 0.0
        # Why Kafka refused this worker mid-run (an ACL), when it did: the CLI exits 1 with it
        self.refused: str | None = None
        self.health: HealthServer | None = None
        self.spill: Spill | None = None  # made in run() when VF_ROUTE_SPILL_QUEUE > 0

    def _device_idle(self) -> bool:
        """The batcher's idle(): a batch taken now would not wait for the device. Mixing
        voices, the gate's own count (a batch storing its outputs holds no slot); else the
        batches running, storing included, against the shared slots."""
        if self._gate is not None and self._mixing:
            return self._gate.has_free_slot()
        return self._running_batches < self.shape.batch_slots

    @property
    def processed(self) -> int:
        """Records answered (result or DLQ acknowledged) since run() started."""
        return 0 if self.checkpoint is None else self.checkpoint.answered

    # -- lifecycle ---------------------------------------------------------------------

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """Start, serve until stop() or a signal, then drain and stop.

        Every part's stop goes on one exit stack as the part is made or started
        (consumers/startup.py), so the shutdown is the start-up in reverse: drain (routers
        told first), fleet tombstone, group consumer, control reader, producer, batch
        threads, health server.
        A start-up step that fails (MissingTopics, a broker that refuses) unwinds the same
        stack: what had started is stopped, and the error goes on to the caller.
        """
        async with contextlib.AsyncExitStack() as stack:
            try:
                await self._start(stack)
            except Exception as exc:
                log.error("worker start-up failed, stopping what had started: %s", exc)
                raise
            await self._stopping.wait()
        log.info("worker stopped after %d requests", self.processed)
        if self.fatal is not None:  # `voicefactory worker` exits 1
            raise FatalPublishError(self.fatal)

    def _on_fatal(self, exc: KafkaError) -> None:
        """The producer can publish nothing more: readiness drops (lifecycle.py reads
        `fatal`), then the worker drains what it can and run() raises."""
        if self.fatal is not None:
            return
        self.fatal = exc
        log.critical("the producer can publish nothing more (%s: %s): stopping the worker; "
                     "unanswered records stay uncommitted for the next owner",
                     type(exc).__name__, exc)
        self._stopping.set()

    async def _start(self, stack: contextlib.AsyncExitStack) -> None:
        s = self._settings.worker
        if s.metrics_port >= 0:
            self.health = HealthServer(host=s.metrics_host, port=s.metrics_port,
                                       metrics=self.metrics, liveness=self.liveness,
                                       readiness=self.readiness)
            await startup.start_part(stack, "health server", self.health.start,
                                     self.health.stop, logger=log)
        stack.callback(self._threads.shutdown)  # made in __init__; stopped before /healthz
        if self._gate is not None and self._mixing:  # batches wait for a slot: wake them
            loop = asyncio.get_running_loop()

            def wake() -> None:
                with contextlib.suppress(RuntimeError):  # the loop closed: nothing waits
                    loop.call_soon_threadsafe(self.batcher.poke)

            self._gate.on_room = wake
            stack.callback(setattr, self._gate, "on_room", None)
        if self._warm_up is not None:
            # Load before joining the group: a member that cannot serve takes no partition.
            self._warming = True
            try:
                await asyncio.to_thread(self._warm_up)
            finally:
                self._warming = False
            self.heartbeat.beat()
        consumer = lanes.group_consumer(self._settings)
        # No linger: a lone result or first chunk leaves at once (2 ms of linger cost 2.5 ms
        # of publish at p50); under load records still share a request, since the producer
        # sends one request at a time per broker and what arrives meanwhile waits for the next
        # (docs/benchmarks.md section 1: same capacity within the runs' noise).
        producer = make_producer(self._settings.kafka, linger_ms=0)
        control = make_consumer(self._settings.kafka, group_id=None, enable_auto_commit=False)
        reader = ControlReader(  # not in the group: every worker reads every command
            consumer=control,
            topic=self._names.control, registry=self.cancels, on_cancel=self._canceller.on_cancel,
            on_command=self.metrics.on_control, partitions_for=producer.partitions_for)
        # Every client made is closed, started or not (aiokafka warns of one never closed,
        # and a half-started one holds connections); they stop as consumer, reader, producer.
        startup.push_stop(stack, "producer", producer.stop, logger=log)
        startup.push_stop(stack, "control reader", reader.stop, logger=log)
        startup.push_stop(stack, "group consumer", consumer.stop, logger=log)
        self._consumer = consumer
        publisher = Publisher(producer=producer, names=self._names, store=self._store,
                              on_fatal=self._on_fatal, store_retry_s=s.storage_retry_seconds)
        self.checkpoint = Checkpoint(consumer=consumer, metrics=self.metrics,
                                     publisher=publisher,
                                     stuck_after_s=s.stuck_partition_seconds)
        self.streams = StreamRunner(
            chunks=ChunkPublisher(producer=producer, topic=self._names.audio,
                                  metrics=self.metrics, on_fatal=self._on_fatal),
            processor=self._processor, checkpoint=self.checkpoint, metrics=self.metrics,
            names=self._names, threads=self._threads, checker=self.cancels.checker)
        fleet = StatusReporter(worker_id=self.name, producer=producer, consumer=consumer,
                               names=self._names, checkpoint=self.checkpoint,
                               batcher=self.batcher, slots=self.shape.slots,
                               interval_ms=self._settings.routing.fleet_interval_ms,
                               hot=self._hot_voices, draining=self._stopping.is_set,
                               metrics=self.metrics)
        lanes.check_assignor(s.assignor)
        consumer.subscribe(lanes.lane_topics(self._names), listener=RevocationListener(
            checkpoint=self.checkpoint, batcher=self.batcher, metrics=self.metrics,
            grace_s=s.revoke_grace_seconds))
        await producer.start()
        await reader.start()
        # Asked before joining: the group consumer's start waits ~20 s for a missing topic
        # and then fails with an unnamed broker error; the reader's consumer is started.
        await lanes.check_topics(control, self._names)
        await consumer.start()
        await self._start_spill(stack, producer)
        log.info("worker %s consuming %s as group %s: %s, max_batch %d", self.name,
                 " + ".join(lanes.lane_topics(self._names)), s.group_id, self.shape.describe(),
                 s.max_batch)
        loops = [self._watched(self._fetch_loop(), "fetch"),
                 self._watched(self._commit_loop(), "commit"),
                 self._watched(reader.run(), "control"),
                 self._watched(fleet.run(), "fleet")]
        dispatchers = [self._watched(self._dispatch_loop(lane), f"dispatch-{i}")
                       for i, lane in enumerate(self.shape.dispatchers)]

        async def drain() -> None:
            await fleet.announce_draining()  # routers send nothing new here
            await self._drain(loops, dispatchers)

        startup.push_stop(stack, "fleet status", fleet.retire, logger=log)
        # unwound first; bounded by VF_DRAIN_SECONDS itself
        startup.push_stop(stack, "drain", drain, logger=log, timeout_s=None)

    async def _start_spill(self, stack: contextlib.AsyncExitStack, producer: Any) -> None:
        """The fleet view this worker's spill routes by (spill.py), when spill is on."""
        routing = self._settings.routing
        if not routing.fleet or routing.spill_queue <= 0:
            return
        router = FleetRouter(partitions=REQUESTS.partitions, balance=routing.balance,
                             home_queue=routing.home_queue, copy_share=routing.copy_share)
        view = FleetView(self._settings.kafka, self._names.fleet, router)
        await startup.start_part(stack, "fleet view", view.start, view.stop, logger=log)
        self.spill = Spill(worker_id=self.name, producer=producer,
                           names=self._names, router=router, queue=routing.spill_queue)

    def _watched(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """One of the worker's loops: a loop that dies is logged at once (the drain would
        otherwise only gather its exception at shutdown)."""
        return startup.watch(asyncio.create_task(coro, name=name), logger=log,
                             what=f"worker loop {name}")

    async def _drain(self, loops: list[asyncio.Task[None]],
                     dispatchers: list[asyncio.Task[None]]) -> None:
        """Stop fetching -> finish queued and in-flight requests -> publish -> commit."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._settings.worker.drain_seconds
        loops[0].cancel()
        self.batcher.close()  # dispatchers hand out what is queued, then exit
        await asyncio.wait(dispatchers, timeout=self._settings.worker.drain_seconds)
        # Then every record taken off the broker is answered or given back (retry timers
        # give theirs back once they see the stop).
        await self._cp.wait_idle(None, max(0.0, deadline - loop.time()))
        late = [t for t in [*dispatchers, *self._tasks] if not t.done()]
        for task in late:
            task.cancel()
        if late:
            log.warning("drain: %d tasks unfinished after %.0f s, left to the next owner",
                        len(late), self._settings.worker.drain_seconds)
        for task in loops[1:]:  # commit and control
            task.cancel()
        # Bounded: a loop whose cancel a library call swallowed must not hold the stop
        # forever (a status loop once did, in CI); it is named and left behind.
        ended, stuck = await asyncio.wait([*loops, *late], timeout=_CANCEL_WAIT_S)
        for task in ended:  # retrieved (as gather did): logged by watch() / _spawn already
            if not task.cancelled():
                task.exception()
        if stuck:
            log.warning("drain: %s still running %.0f s after being cancelled; stopping anyway",
                        ", ".join(sorted(t.get_name() for t in stuck)), _CANCEL_WAIT_S)
        # Bounded too: aiokafka's commit waits for a group coordinator without end, and with
        # the broker gone none comes. What stays uncommitted is redelivered to the next owner.
        try:
            async with asyncio.timeout(_FINAL_COMMIT_S):
                await self._cp.commit()
        except TimeoutError:
            log.warning("drain: the last commit got no answer in %.0f s (is the broker down?): "
                        "the next owner of those partitions gets their answered records again "
                        "and answers them from the store", _FINAL_COMMIT_S)

    # -- fetching ----------------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        consumer, cp, s = self._consumer, self._cp, self._settings.worker
        capacity, floor = s.queue_capacity, (s.max_batch if s.batch_min_share > 0 else 0)
        while True:
            self.heartbeat.beat()
            # Requests waiting to be retried count in both lanes: a store outage must not
            # turn into an unbounded pile of retry timers.
            inter = self.batcher.qsize("interactive") + cp.retry_waiting
            batch = self.batcher.qsize("batch") + cp.retry_waiting
            self.metrics.set_paused(lanes.apply_pauses(
                consumer, self._names, capacity=capacity, interactive_queued=inter,
                batch_queued=batch, batch_floor=floor))
            try:
                batches = await consumer.getmany(
                    timeout_ms=200, max_records=max(1, capacity - min(inter, batch)))
            except KafkaError as exc:
                if kafka_access.is_access_error(exc):  # denied: waiting cannot help
                    self.refused = kafka_access.explain(exc, self._settings.kafka) or str(exc)
                    log.error("fetch refused, stopping: %s", self.refused)
                    self._stopping.set()
                    return
                log.warning("fetch failed: %s", exc)
                await asyncio.sleep(0.5)
                continue
            except UnicodeDecodeError as exc:  # a record aiokafka cannot parse: unreadable.py
                await self._unreadable(consumer).recover(exc)
                continue
            self._last_fetch_ok = time.monotonic()
            for tp, records in batches.items():
                if not cp.owns(tp):
                    continue
                for rec in records:
                    self._accept(tp, rec)
            lanes.report_depth(self.metrics, self.batcher)

    def _unreadable(self, consumer: Any) -> UnreadableRecords:
        def dead_letter(tp: TopicPartition, offset: int, why: str) -> None:
            if not self._cp.begin(tp, offset):
                return
            self.metrics.on_request_in()
            self.metrics.on_dlq(ErrorCode.INVALID_JSON.value)
            rec, dlq = unreadable_letter(tp, offset, why)
            self._spawn(self._cp.answer(tp, rec, dlq=dlq),
                        {"partition": tp.partition, "offset": offset})

        def accept(tp: TopicPartition, rec: ConsumerRecord[bytes, bytes]) -> None:
            if self._cp.owns(tp):
                self._accept(tp, rec)

        return UnreadableRecords(consumer=consumer, resume=self._cp.resume_offset,
                                 accept=accept, dead_letter=dead_letter)

    def _accept(self, tp: TopicPartition, rec: ConsumerRecord[bytes, bytes]) -> None:
        ctx = {"partition": rec.partition, "offset": rec.offset}
        if not self._cp.begin(tp, rec.offset):  # step 0
            log.debug("refetched record already in flight or answered: skipped", extra=ctx)
            return
        self.metrics.on_request_in()
        try:
            request = decode_request(rec.value)
        except UndecodableMessage as exc:
            log.warning("undecodable message to the DLQ: %s", exc.message, extra=ctx)
            self.metrics.on_dlq(exc.code.value)
            self._spawn(self._cp.answer(tp, rec, dlq=dead_letter(rec, str(exc))), ctx)
            return
        except InvalidRequest as exc:
            ctx = {**ctx, "request_id": exc.request_id, "voice_id": exc.voice_id}
            log.info("rejected: %s", exc, extra=ctx)
            if exc.request_id is None:  # nobody to answer: keep the bytes in the DLQ
                self.metrics.on_dlq(exc.code.value)
                self._spawn(self._cp.answer(tp, rec, dlq=dead_letter(rec, str(exc))), ctx)
                return
            result = self._processor.answers.rejected(exc)
            if wants_stream(rec.value) and self.streams is not None:  # its reader waits
                self._spawn(self.streams.answer(tp, rec, result=result), ctx)
            else:
                self._spawn(self._cp.answer(tp, rec, result=result), ctx)
            return
        req = lanes.in_flight(rec, tp, request, self._names,
                              self._settings.worker.interactive_deadline_s)
        if self._canceller.cancel_if_named(req):
            return
        route = (self.spill.target(req, self.batcher.qsize(req.lane))
                 if self.spill is not None else None)
        if route is None:
            self.batcher.put(queue_key(req.request), req, req.lane)
        else:
            self._spawn(self._forward(req, route), ctx)

    async def _forward(self, req: InFlightRequest, route: Route) -> None:
        """Spill one request (spill.py); if the copy is refused, serve it here after all."""
        assert self.spill is not None
        try:
            await self.spill.forward(req, route)
        except asyncio.CancelledError:  # the drain: unanswered, so redelivered after it
            self._cp.abandon(req.tp, req.record.offset)
            raise
        except Exception as exc:
            log.warning("spill to %s failed, serving it here: %s", route.worker, exc,
                        extra=req.ctx())
            if self._cp.owns(req.tp):
                self.batcher.put(queue_key(req.request), req, req.lane)
            else:  # revoked meanwhile: its next owner gets it again
                self._cp.abandon(req.tp, req.record.offset)
            return
        self._cp.forwarded(req.tp, req.record.offset)
        self.metrics.on_spill(req.lane)

    # -- answer tasks (the answer path itself, dispatch to Checkpoint.answer: dispatch.py) --

    def _spawn(self, coro: Coroutine[Any, Any, None],
               ctx: Mapping[str, Any] | None = None) -> None:
        """A task of the answer path (publishing, a retry timer): kept to cancel at the
        drain, and logged with the record's `ctx` if it dies, since nobody awaits it."""
        task = asyncio.create_task(_fatal_logged_once(coro))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        startup.watch(task, logger=log, what=getattr(coro, "__qualname__", "worker task"),
                      context=ctx)

    # -- commits and lag (health probes and signals: lifecycle.py) ----------------------

    async def _commit_loop(self) -> None:
        while True:
            await self._cp.wait_due(self._commit_interval_s)
            await self._cp.commit()  # step 4
            await self._cp.update_lag()  # and stuck partitions (lag.py)


async def _fatal_logged_once(coro: Coroutine[Any, Any, None]) -> None:
    """An answer cut short by a fatal producer error: _on_fatal logged it once already."""
    with contextlib.suppress(FatalPublishError):
        await coro
