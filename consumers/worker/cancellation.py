"""Cancellation on the worker: tts.control commands -> a registry of cancelled IDs.

    tts.control (every partition, manually assigned, no group)
        --ControlReader--> decode_control (topics/control.py; a bad record: log line, skip)
        --> CancelRegistry.add (request ID or job ID within the command's tenant, for
            `ttl_s`, at most `max_entries`; the reason cut to MAX_REASON_CHARS)
        --> on_cancel(command): the worker takes the matching requests out of its queue and
            answers them `cancelled` (dispatch.py)
    the worker, later: a fetched request, a retry coming back, a batch taken for the engine
        --CancelRegistry.is_cancelled(request_id, job_id, tenant)--> answered `cancelled`, no
        engine call (a cancel acts only on its own tenant's requests: IDs are unique within a
        tenant, so another tenant's request of the same ID is not the one it names)
    a request already in the engine: `checker(request_id, job_id)` is the zero-argument
        callable a streaming engine calls between chunks.

Why manual assignment and not the worker's group: every worker must see every command (a
broadcast, not a work split), and a cancel must reach the worker that owns the request
whichever it is. A per-process group would do the same but leave one group behind on the
broker for every start; manual assignment leaves nothing and commits nothing. Instead of
committed offsets a starting reader replays the last `ttl_s` of the topic (its retention is
one day), so a cancel produced while the worker was restarting still finds the requests the
worker is about to be redelivered.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from consumers.kafka import read_since
from consumers.kafka_access import is_access_error
from consumers.worker.batching import VoiceBatcher
from consumers.worker.inflight import InFlightRequest
from pipeline.answers import Answers
from topics.control import InvalidControl, decode_control
from topics.errors import clip
from topics.events import ControlCommand, SynthesisResult
from topics.tenancy import scoped_id, tenant_of

log = logging.getLogger(__name__)

# A cancel's reason is echoed in each `cancelled` result it causes: a reason of any size
# (the schema sets none) would make those results too large for the broker.
MAX_REASON_CHARS = 500


class CancelRegistry:
    """Cancelled request and job IDs, each remembered for `ttl_s` seconds, at most
    `max_entries` of them (the oldest go first). O(1) add and lookup; expiry is lazy."""

    def __init__(self, *, ttl_s: float = 86_400.0, max_entries: int = 100_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s!r}")
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries!r}")
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._clock = clock
        # ("request" | "job", ID) -> (expires at, reason); insertion order = expiry order,
        # since every entry lives the same ttl_s (a repeated cancel moves to the end).
        self._entries: OrderedDict[tuple[str, str], tuple[float, str]] = OrderedDict()

    def add(self, command: ControlCommand, *, age_s: float = 0.0) -> None:
        """Remember the command's target; `age_s`: how long ago it was issued (a replayed
        command lives out the rest of its ttl, not a fresh one)."""
        key = (("request", scoped_id(command.tenant, command.request_id))
               if command.request_id is not None
               else ("job", scoped_id(command.tenant, command.job_id or "")))
        self._expire()
        self._entries.pop(key, None)
        self._entries[key] = (self._clock() + self.ttl_s - max(0.0, age_s),
                              clip(command.reason or "", MAX_REASON_CHARS))
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def is_cancelled(self, request_id: str, job_id: str | None = None,
                     tenant: str | None = None) -> bool:
        """Whether the tenant's request, or the job it belongs to, is cancelled."""
        return self.reason(request_id, job_id, tenant) is not None

    def reason(self, request_id: str, job_id: str | None = None,
               tenant: str | None = None) -> str | None:
        """The cancel's reason ("" when it gave none) if the request or its job is cancelled
        by a command of the same tenant, else None."""
        now = self._clock()
        keys = [("request", scoped_id(tenant, request_id))] + (
            [("job", scoped_id(tenant, job_id))] if job_id is not None else [])
        for key in keys:
            entry = self._entries.get(key)
            if entry is not None and entry[0] > now:
                return entry[1]
        return None

    def checker(self, request_id: str, job_id: str | None = None,
                tenant: str | None = None) -> Callable[[], bool]:
        """`is_cancelled` bound to one request: what the processor asks before the engine,
        and a streaming sink between chunks."""
        return functools.partial(self.is_cancelled, request_id, job_id, tenant)

    def __len__(self) -> int:
        self._expire()
        return len(self._entries)

    def _expire(self) -> None:
        now = self._clock()
        while self._entries:
            key, (expires, _reason) = next(iter(self._entries.items()))
            if expires > now:
                return
            del self._entries[key]


class ControlReader:
    """Reads every partition of tts.control into a CancelRegistry and calls `on_cancel`."""

    def __init__(self, *, consumer: Any, topic: str, registry: CancelRegistry,
                 on_cancel: Callable[[ControlCommand], None],
                 on_command: Callable[[str], None] | None = None,
                 partitions_for: Callable[[str], Awaitable[set[int]]] | None = None) -> None:
        self._consumer = consumer  # an AIOKafkaConsumer without a group; start() starts it
        # The topic's partitions: a producer's partitions_for (a consumer without a
        # subscription has no public way to fetch them).
        self._partitions_for = partitions_for
        self._topic = topic
        self._registry = registry
        self._on_cancel = on_cancel
        self._on_command = on_command or (lambda _result: None)
        self.applied = 0

    async def start(self, catch_up_s: float = 10.0) -> list[TopicPartition]:
        """Start the consumer, assign every partition, position each at the start of the
        replay window, and read up to where the topic ended when this began (at most
        `catch_up_s`), so the cancels made before a restart are known before the first
        request is fetched."""
        consumer = self._consumer
        await consumer.start()
        partitions: set[int] = set()
        if self._topic in await consumer.topics() and self._partitions_for is not None:
            partitions = await self._partitions_for(self._topic)
        tps = [TopicPartition(self._topic, p) for p in sorted(partitions)]
        if not tps:
            log.warning("control topic %s not found: cancels will not reach this worker",
                        self._topic)
            return []
        consumer.assign(tps)
        since_ms = int((time.time() - self._registry.ttl_s) * 1000)
        if not await read_since(consumer, tps, since_ms, limit_s=catch_up_s,
                                read=lambda: self._read_once(timeout_ms=200)):
            log.warning("control topic %s: replay not finished in %.0f s; going on",
                        self._topic, catch_up_s)
        log.info("control topic %s: %d partitions, %d cancels remembered", self._topic,
                 len(tps), len(self._registry))
        return tps

    async def run(self) -> None:
        while True:
            await self._read_once(timeout_ms=500)

    async def stop(self) -> None:
        await self._consumer.stop()

    async def _read_once(self, *, timeout_ms: int) -> None:
        try:
            batches = await self._consumer.getmany(timeout_ms=timeout_ms)
        except KafkaError as exc:
            if is_access_error(exc):  # denied, not unavailable: waiting cannot help
                raise
            log.warning("reading %s failed: %s", self._topic, exc)
            await asyncio.sleep(1.0)
            return
        for records in batches.values():
            for rec in records:
                self.handle(rec.value, timestamp_ms=rec.timestamp,
                            where={"topic": rec.topic, "partition": rec.partition,
                                   "offset": rec.offset})

    def handle(self, raw: bytes | None, *, timestamp_ms: int,
               where: dict[str, Any] | None = None) -> ControlCommand | None:
        """One control record: registered and passed on, or logged and skipped."""
        try:
            command = decode_control(raw)
        except InvalidControl as exc:
            log.warning("control record skipped: %s", exc, extra=where or {})
            self._on_command("invalid")
            return None
        age_s = max(0.0, time.time() - timestamp_ms / 1000)
        if age_s >= self._registry.ttl_s:
            self._on_command("expired")
            return None
        self._registry.add(command, age_s=age_s)
        self.applied += 1
        self._on_command("applied")
        log.info("cancel of %s %s (%s)", "request" if command.request_id else "job",
                 command.request_id or command.job_id,
                 clip(command.reason or "no reason given", MAX_REASON_CHARS),
                 extra={**(where or {}), "request_id": command.request_id})
        self._on_cancel(command)
        return command


class QueueCanceller:
    """Answers `cancelled` the requests a remembered cancel names, wherever they wait: in the
    batcher when the cancel arrives (on_cancel), and when one is fetched, taken by a
    dispatcher or back from a retry backoff (cancel_if_named). `answers` gives the processor's
    Answers; `finish` is the worker's
    answer path (metrics, then Checkpoint.answer: the offset is committed only once the
    cancelled result is acknowledged)."""

    def __init__(self, *, registry: CancelRegistry, batcher: VoiceBatcher[InFlightRequest],
                 answers: Callable[[], Answers],
                 finish: Callable[[InFlightRequest, SynthesisResult], None]) -> None:
        self._registry = registry
        self._batcher = batcher
        self._answers = answers
        self._finish = finish
        self.cancelled = 0

    def on_cancel(self, command: ControlCommand) -> None:
        def named(req: InFlightRequest) -> bool:
            if tenant_of(req.request.tenant) != tenant_of(command.tenant):
                return False
            if command.request_id is not None:
                return req.request.request_id == command.request_id
            return req.job_id == command.job_id

        for req in self._batcher.drop(named):
            self.cancel_if_named(req)

    def cancel_if_named(self, req: InFlightRequest) -> bool:
        """Answer `req` cancelled, with no engine call, if a remembered cancel names it."""
        reason = self._registry.reason(req.request.request_id, req.job_id, req.request.tenant)
        if reason is None:
            return False
        self.cancelled += 1
        self._finish(req, self._answers().cancelled(req.request, attempt=req.attempt,
                                                    reason=reason or None,
                                                    queued_ms=req.queued_ms()))
        return True
