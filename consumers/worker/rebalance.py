"""Partition revocation and assignment for the synthesis worker.

revoked: mark the partitions (no new work starts for them) -> drop their queued requests ->
wait up to the grace period for their in-flight requests -> commit what finished -> forget
them. What did not finish is abandoned to the new owner, which redelivers it; the stored
objects make that cheap. aiokafka awaits this listener before it rejoins the group.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from aiokafka import ConsumerRebalanceListener, TopicPartition

if TYPE_CHECKING:
    from consumers.worker.loop import SynthesisWorker

log = logging.getLogger(__name__)


class RevocationListener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, worker: SynthesisWorker) -> None:
        self._worker = worker

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        w = self._worker
        if not revoked:
            return
        w.revoked.update(revoked)
        dropped = w.batcher.drop(lambda job: job.tp in revoked)
        for job in dropped:
            w._release(job.tp)
        deadline = time.monotonic() + w._settings.revoke_grace_seconds
        while any(w.inflight_by_tp.get(tp, 0) > 0 for tp in revoked):
            if time.monotonic() > deadline:
                log.warning("revocation: in-flight work on %s abandoned after %.0f s",
                            sorted(tp.partition for tp in revoked),
                            w._settings.revoke_grace_seconds)
                break
            await asyncio.sleep(0.05)
        await w.commit(only=set(revoked))
        w.tracker.forget(revoked)
        for tp in revoked:
            w.metrics.clear_lag(tp.topic, tp.partition)
        w.metrics.on_rebalance("revoked", len(revoked))
        log.info("revoked partitions %s (%d queued requests left to the next owner)",
                 sorted(tp.partition for tp in revoked), len(dropped))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        w = self._worker
        w.revoked.difference_update(assigned)
        w.metrics.on_rebalance("assigned", len(assigned))
        log.info("assigned partitions %s", sorted(tp.partition for tp in assigned))
