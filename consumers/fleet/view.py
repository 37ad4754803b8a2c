"""The fleet view in a router's process: tts.fleet tailed into a FleetRouter.

    start(): a group-less consumer assigned every partition of tts.fleet from the beginning
        (compacted: one status per worker, plus tombstones) -> read up to the end offsets it
        had at start, at most `catch_up_s` (so the first route already sees the fleet)
        -> a background task tails it; each read marks the router current as of the
           broker's last fetch answer, so a worker's silence counts only while this process
           hears the broker (a stalled loop is not a fleet gone quiet)
    each record: null value -> router.remove(worker); a status -> router.apply,
        `replayed` when it lies before the end offsets of the start (such a status too old
        to be a live worker's is dropped there; one written since is a worker that just
        spoke, whatever its host's clock says); anything else is logged and skipped

Without the topic (a cluster made before routing) start() logs one warning and the router
stays empty: every route is then the plain voice_id, which is what producers did before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import msgspec
from aiokafka import TopicPartition

from consumers import startup
from consumers.fleet.router import FleetRouter
from consumers.kafka import make_consumer, read_since
from consumers.settings import KafkaSettings
from topics.fleet import decode_status

log = logging.getLogger(__name__)


class FleetView:
    def __init__(self, kafka: KafkaSettings, topic: str, router: FleetRouter, *,
                 catch_up_s: float = 5.0) -> None:
        self._kafka = kafka
        self.topic = topic
        self.router = router
        self._catch_up_s = catch_up_s
        self._consumer: Any = None
        self._task: asyncio.Task[None] | None = None
        self.records = 0
        self._history: dict[TopicPartition, int] = {}  # end offsets at start: older is replayed
        self.available = False  # the topic exists and was read

    async def start(self) -> None:
        consumer = make_consumer(self._kafka, group_id=None, enable_auto_commit=False,
                                 fetch_max_wait_ms=50)
        await consumer.start()
        self._consumer = consumer
        # A metadata request for all topics: asking for this one by name would have a broker
        # with auto-creation on make it, with the wrong cleanup policy.
        cluster = await consumer._client.fetch_all_metadata()
        partitions = cluster.partitions_for_topic(self.topic)
        if not partitions:
            log.warning("topic %s not found: routing by voice_id only (run `voicefactory "
                        "topics create` to add it)", self.topic)
            return
        tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        self._history = await consumer.end_offsets(tps)
        if not await read_since(consumer, tps, 0, limit_s=self._catch_up_s,
                                read=lambda: self.poll(timeout_ms=100)):
            log.warning("fleet view not read to its end within %.0f s", self._catch_up_s)
        self.available = True
        self._task = startup.watch(asyncio.create_task(self._tail(), name="fleet-view"),
                                   logger=log, what="fleet view tail")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def __aenter__(self) -> FleetView:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def poll(self, timeout_ms: int = 200) -> None:
        batches = await self._consumer.getmany(timeout_ms=timeout_ms)
        for tp, records in batches.items():
            history = self._history.get(tp, 0)
            for record in records:
                self._apply(record.key, record.value, replayed=record.offset < history)
        # Every record fetched so far is applied: the view is as current as the broker's
        # last fetch answer, which may be older than now (a stalled loop fetches nothing).
        answered = [self._consumer.last_poll_timestamp(tp) for tp in self._history]
        if answered and None not in answered:
            self.router.hearing.mark_current(lag_s=time.time() - min(answered) / 1000)

    def _apply(self, key: bytes | None, value: bytes | None, *, replayed: bool) -> None:
        self.records += 1
        if value is None:
            if key:
                self.router.remove(key.decode("utf-8", "replace"))
            return
        try:
            status = decode_status(value)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.warning("tts.fleet record skipped: %s", exc)
            return
        self.router.apply(status, replayed=replayed)

    async def _tail(self) -> None:
        while True:
            try:
                await self.poll()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("fleet view fetch failed; retrying", exc_info=True)
                await asyncio.sleep(0.5)
