"""Worker-side spill: plain-keyed overflow moves to a less loaded worker's shard partition.

External producers key by `voice_id`, so a hot voice they produce lands on one partition of
a plain lane and one worker, however large the fleet (docs/routing.md). A worker that holds
such a backlog forwards the excess:

    fetch loop: a valid record of a plain lane (never one of a shard lane: a record moves
        once at most), while this worker's queue for that lane holds >= `queue` requests
        -> Spill.target(): the fleet view's router (FleetView on tts.fleet, this worker
           avoided) picks the voice's next worker; only one expected to start it sooner,
           its load + 1 below this worker's queue; counted there at once, so the rest of
           the same fetch spreads over the others
        -> Spill.forward(): the same value and headers, the original record's timestamp,
           produced to that worker's partition of the lane's shard topic, key voice_id or
           voice_id#<shard>, acks=all, awaited
        -> Checkpoint.forwarded(): the original offset is done (committable) without a
           result from this worker; the receiving worker answers, same request_id
    a forward that fails: the request goes to this worker's own queue, as if never spilled

Nothing is lost: the offset becomes committable only after the broker acknowledged the copy,
and a crash between the two redelivers the original, which the object store answers once the
copy was synthesized (the same request_id; downstream deduplicates by it). Off with
VF_ROUTE_SPILL_QUEUE=0 or VF_ROUTING=voice.
"""

from __future__ import annotations

import logging
from typing import Any

from aiokafka import ConsumerRecord

from consumers.fleet.router import FleetRouter, Route
from consumers.worker.inflight import InFlightRequest
from consumers.worker.lanes import is_shard_lane
from topics.specs import TopicNames

log = logging.getLogger(__name__)


class Spill:
    def __init__(self, *, worker_id: str, producer: Any, names: TopicNames,
                 router: FleetRouter, queue: int) -> None:
        if queue < 1:
            raise ValueError(f"the spill queue must be >= 1 (0 turns spill off), got {queue}")
        self.worker_id = worker_id
        self._producer = producer
        self._names = names
        self.router = router
        self.queue = queue

    def target(self, req: InFlightRequest, queued: int) -> Route | None:
        """Where `req` should go instead of this worker's queue (which holds `queued` of its
        lane), or None to keep it."""
        if queued < self.queue or is_shard_lane(req.record.topic, self._names):
            return None
        route = self.router.route(req.request.voice_id, req.lane, avoid=(self.worker_id,))
        if not route.sharded or route.worker is None or route.partition is None:
            return None  # no view yet, or no other worker reads the shard lanes
        if self.router.load(req.lane, route.worker) + 1 >= queued:
            return None  # it would wait as long there: a move would only cost a build
        # Counted now, not once the copy is acknowledged: a fetch decides for a whole batch
        # of records before any forward completes, and each decision must see the last.
        # Counted until that worker's next status includes it.
        self.router.sent(req.request.request_id, route, req.lane, answer_follows=False)
        return route

    async def forward(self, req: InFlightRequest, route: Route) -> None:
        """Produce the copy and wait for the broker's acknowledgement (raises if refused)."""
        rec: ConsumerRecord[bytes, bytes] = req.record
        topic = (self._names.requests_interactive_shards if req.lane == "interactive"
                 else self._names.requests_shards)
        await self._producer.send_and_wait(topic, rec.value, key=route.key.encode(),
                                           partition=route.partition,
                                           timestamp_ms=rec.timestamp,
                                           headers=list(rec.headers))
        log.debug("spilled to %s (%s, partition %d)", route.worker, route.key, route.partition,
                  extra={"request_id": req.request.request_id})
