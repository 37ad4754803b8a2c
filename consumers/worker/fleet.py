"""The worker's part of the fleet view: its status on tts.fleet, about twice a second.

    every interval: consumer.assignment() -> per lane (lanes.lane_of): its partitions of the
        plain topic and of the shard topic (lanes.is_shard_lane), the records on them not
        yet fetched (high watermark - position), the fetched ones still queued (VoiceBatcher)
        and the rest of those taken and unanswered (Checkpoint, on the device or being
        published), its device slots -> `WorkerStatus` (topics/fleet.py), plus the voices
        whose profiles the cache holds, and since the worker started its profile cache
        lookups (hit/store/miss) and its failed results by error code (WorkerMetrics' plain
        counts, the numbers behind vf_profile_cache_total and vf_requests_total) -> tts.fleet,
        keyed by worker ID
    draining (SIGTERM): one status saying so, so routers stop sending here at once
    stopped: a tombstone under the key, so routers forget this worker without waiting

A status that cannot be sent is logged and the next one tried: routers treat a silent
worker as gone after three intervals, which is the behaviour wanted of a worker that cannot
reach the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from consumers.metrics import WorkerMetrics
from consumers.worker.batching import Lane, VoiceBatcher
from consumers.worker.checkpoint import Checkpoint
from consumers.worker.lanes import is_shard_lane, lane_of
from topics.fleet import MAX_HOT_VOICES, LaneLoad, ProfileCounts, WorkerStatus, encode_status
from topics.specs import TopicNames

log = logging.getLogger(__name__)

_POSITION_WAIT_S = 0.05  # a partition still resolving its position counts no backlog yet


class StatusReporter:
    def __init__(self, *, worker_id: str, producer: Any, consumer: Any, names: TopicNames,
                 checkpoint: Checkpoint, batcher: VoiceBatcher[Any],
                 slots: Mapping[Lane, int], interval_ms: int,
                 hot: Callable[[], list[str]] = list,
                 draining: Callable[[], bool] = lambda: False,
                 metrics: WorkerMetrics | None = None) -> None:
        self.worker_id = worker_id
        self._producer = producer
        self._consumer = consumer
        self._names = names
        self._cp = checkpoint
        self._batcher = batcher
        self._slots = dict(slots)
        self._interval_ms = interval_ms
        self._hot = hot
        self._draining = draining
        self._metrics = metrics
        self.sent = 0
        self.missing_topic = False

    async def snapshot(self) -> WorkerStatus:
        lanes: dict[str, LaneLoad] = {
            lane: LaneLoad(slots=slots) for lane, slots in self._slots.items()}
        taken: dict[str, int] = dict.fromkeys(lanes, 0)
        for tp in sorted(self._consumer.assignment(), key=lambda t: (t.topic, t.partition)):
            lane = lane_of(tp.topic, self._names)
            if lane not in lanes:
                continue
            load = lanes[lane]
            (load.shards if is_shard_lane(tp.topic, self._names)
             else load.partitions).append(tp.partition)
            load.backlog += await self._unfetched(tp)
            taken[lane] += self._cp.inflight(tp)
        names = self._names
        for topic in (names.requests, names.requests_interactive, names.requests_shards,
                      names.requests_interactive_shards):
            known = self._consumer.partitions_for_topic(topic)
            if not known:
                continue
            load = lanes[lane_of(topic, names)]
            if is_shard_lane(topic, names):
                load.shard_partitions = len(known)
            else:
                load.topic_partitions = len(known)
        for name, load in lanes.items():
            load.queued = self._batcher.qsize(name)  # type: ignore[arg-type]
            load.inflight = max(0, taken[name] - load.queued)
        profiles, errors = None, {}
        if self._metrics is not None:
            profiles = ProfileCounts(**self._metrics.profile_counts)
            errors = dict(sorted(self._metrics.error_counts.items()))
        return WorkerStatus(worker=self.worker_id, at_ms=int(time.time() * 1000),
                            interval_ms=self._interval_ms, lanes=lanes,
                            hot=self._hot()[:MAX_HOT_VOICES], draining=self._draining(),
                            profiles=profiles, errors=errors)

    async def _unfetched(self, tp: Any) -> int:
        high = self._consumer.highwater(tp)
        if high is None:
            return 0
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancel that lands
        # as its inner call completes, and the drain then waited on this loop forever (CI).
        try:
            async with asyncio.timeout(_POSITION_WAIT_S):
                position = await self._consumer.position(tp)
        except (TimeoutError, Exception):  # not resolved yet, or being revoked
            return 0
        return max(0, int(high) - int(position))

    async def publish(self) -> None:
        status = await self.snapshot()
        await self._producer.send(self._names.fleet, encode_status(status),
                                  key=self.worker_id.encode())
        self.sent += 1

    async def announce_draining(self) -> None:
        """One status now (it says `draining` once the stop began), bounded and quiet: the
        drain that follows must not wait on it."""
        if self.missing_topic:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2.0):
                await self.publish()

    async def run(self) -> None:
        """Publish every interval until cancelled; a failed send is logged, not fatal. A
        cluster without tts.fleet (made before routing) gets a warning and no status: the
        worker serves as before and routers key by voice_id."""
        if self._names.fleet not in await self._consumer.topics():
            log.warning("topic %s not found: this worker is not in the fleet view, so routers "
                        "cannot spread its voices; run `voicefactory topics create`",
                        self._names.fleet)
            self.missing_topic = True
            return
        while True:
            try:
                await self.publish()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("fleet status not sent: %s", exc)
            task = asyncio.current_task()
            if task is not None and task.cancelling():  # a cancel a library call swallowed
                raise asyncio.CancelledError
            await asyncio.sleep(self._interval_ms / 1000)

    async def retire(self) -> None:
        """The tombstone: this worker is gone from the view (best effort, bounded)."""
        if self.missing_topic:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5.0):
                await self._producer.send_and_wait(self._names.fleet, None,
                                                   key=self.worker_id.encode())
