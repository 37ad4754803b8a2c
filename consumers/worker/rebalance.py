"""Partition revocation and assignment for the synthesis worker.

on_partitions_revoked, in order: 1. mark the partitions revoked in the Checkpoint (no new
work starts for them) -> 2. drop their queued requests from the batcher -> 3. wait up to
the grace period for their in-flight requests -> 4. commit what finished -> 5. forget them.
What did not finish is abandoned to the new owner, which redelivers it; the stored objects
make that cheap. aiokafka awaits this listener before it rejoins the group.

The listener talks to the Checkpoint (offsets, in-flight records, commits) and the batcher
(queued work) it is given, never to the worker loop.
"""

from __future__ import annotations

import logging

from aiokafka import ConsumerRebalanceListener, TopicPartition

from consumers.metrics import WorkerMetrics
from consumers.worker.batching import VoiceBatcher
from consumers.worker.checkpoint import Checkpoint
from consumers.worker.inflight import InFlightRequest

log = logging.getLogger(__name__)


def by_topic(tps: set[TopicPartition]) -> str:
    """'tts.requests [0, 4], tts.requests.shards [1, 13]': a worker reads four lanes whose
    partition numbers overlap, so a bare list of numbers would not say which is which."""
    topics: dict[str, list[int]] = {}
    for tp in tps:
        topics.setdefault(tp.topic, []).append(tp.partition)
    return ", ".join(f"{topic} {sorted(parts)}" for topic, parts in sorted(topics.items())) \
        or "none"


class RevocationListener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, *, checkpoint: Checkpoint, batcher: VoiceBatcher[InFlightRequest],
                 metrics: WorkerMetrics, grace_s: float) -> None:
        self._checkpoint = checkpoint
        self._batcher = batcher
        self._metrics = metrics
        self._grace_s = grace_s

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        if not revoked:
            return
        revoked = set(revoked)
        cp = self._checkpoint
        cp.revoke(revoked)  # 1
        dropped = self._batcher.drop(lambda req: req.tp in revoked)  # 2
        for req in dropped:
            cp.abandon(req.tp, req.record.offset)
        if not await cp.wait_idle(revoked, self._grace_s):  # 3
            log.warning("revocation: in-flight work on %s abandoned after %.0f s",
                        by_topic(revoked), self._grace_s)
        await cp.commit(only=revoked)  # 4
        cp.forget(revoked)  # 5
        self._metrics.on_rebalance("revoked", len(revoked))
        log.info("revoked partitions %s (%d queued requests left to the next owner)",
                 by_topic(revoked), len(dropped))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._checkpoint.assign(assigned)
        self._metrics.on_rebalance("assigned", len(assigned))
        log.info("assigned partitions %s", by_topic(assigned))
