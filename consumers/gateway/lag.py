"""Back-pressure: the interactive lane's lag, sampled in the background.

Every `interval_s`: the synthesis group's committed offsets on the interactive lane's two
topics, tts.requests.interactive and its shard topic (admin client, OffsetFetch), and their
begin/end offsets (the reply consumer's
ListOffsets) -> lag = sum over partitions of end - max(committed, begin): requests produced
and not yet finished (workers commit only below their lowest unfinished request) -> the
app's speech route answers 503 with Retry-After while the lag is above the threshold, rather
than queueing a caller behind work it would time out on. A failed sample keeps the last
value and is logged; the sampler never blocks a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from consumers import startup

log = logging.getLogger(__name__)


class LagSampler:
    def __init__(self, *, admin: Callable[[], AIOKafkaAdminClient | None],
                 offsets: Callable[[], AIOKafkaConsumer | None],
                 topics: Sequence[tuple[str, int]], group_id: str, interval_s: float,
                 on_sample: Callable[[int], None] = lambda lag: None) -> None:
        self._admin = admin  # getters: the clients exist only once the gateway started
        self._offsets = offsets  # a started consumer to ask for begin/end offsets
        # (topic, partition count), the plain lane first: its partitions are labelled "3",
        # the shard topic's "s3", in by_partition.
        self._tps = [TopicPartition(topic, p) for topic, n in topics for p in range(n)]
        self._labels = {tp: (str(tp.partition) if tp.topic == topics[0][0]
                             else f"s{tp.partition}") for tp in self._tps}
        self._group_id = group_id
        self._interval_s = interval_s
        self._on_sample = on_sample
        self.lag: int | None = None  # None until the first sample
        self.by_partition: dict[str, int] = {}  # the last sample, per partition (GET /v1/fleet)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = startup.watch(asyncio.create_task(self._run(), name="gateway-lag"),
                                   logger=log, what="interactive lag sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def sample(self) -> int:
        consumer, admin = self._offsets(), self._admin()
        if consumer is None or admin is None:
            raise RuntimeError("no Kafka clients to read offsets with yet")
        committed = await admin.list_consumer_group_offsets(self._group_id,
                                                                  partitions=self._tps)
        begins: dict[TopicPartition, int] = await consumer.beginning_offsets(self._tps)
        ends: dict[TopicPartition, int] = await consumer.end_offsets(self._tps)
        each = {}
        for tp in self._tps:
            done = committed[tp].offset if tp in committed else -1
            each[self._labels[tp]] = max(0, ends.get(tp, 0) - max(done, begins.get(tp, 0)))
        self.by_partition = each
        return sum(each.values())

    async def _run(self) -> None:
        while True:
            try:
                self.lag = await self.sample()
                self._on_sample(self.lag)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("interactive lane lag not sampled: %s", exc)
            await asyncio.sleep(self._interval_s)
