"""Readers of one topic of a benchmark's prefix, from its start, with arrival wall times.

`async with ResultLog(settings)` (tts.results: first answer per request, duplicates, the CPU
ledger's answers per worker) or `bench.streams.AudioLog` (tts.audio chunks): a task reads
every record from the beginning and hands each to the subclass's `take` with the time its
batch arrived, until the block ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Self

from aiokafka import ConsumerRecord, TopicPartition

from bench.cpu import LEDGER
from consumers.kafka import make_consumer
from consumers.settings import Settings
from topics.events import SynthesisResult, decode_result
from topics.specs import RESULTS, TopicNames, topic_names

log = logging.getLogger(__name__)


class TopicReader:
    """Reads every record of one topic of a prefix from its start, in a task, noting the
    wall time each batch arrived: `async with` starts and stops it; subclasses `take`."""

    topic_of: Callable[[TopicNames], str]
    partitions: int

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._task: asyncio.Task[None] | None = None
        self._consumer: Any = None

    async def __aenter__(self) -> Self:
        consumer = make_consumer(self._settings.kafka, enable_auto_commit=False, group_id=None)
        await consumer.start()
        topic = type(self).topic_of(topic_names(self._settings.kafka.topic_prefix))
        tps = [TopicPartition(topic, p) for p in range(self.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        self._consumer = consumer
        self._task = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._consumer.stop()

    async def _read(self) -> None:
        while True:
            try:
                batches = await self._consumer.getmany(timeout_ms=100)
            except Exception as exc:  # broker restarts: keep reading once it is back
                log.debug("read of %s failed: %s", type(self).__name__, exc)
                await asyncio.sleep(0.5)
                continue
            now = time.time()
            for records in batches.values():
                for rec in records:
                    self.take(rec, now)

    def take(self, rec: ConsumerRecord[bytes, bytes], now: float) -> None:
        raise NotImplementedError


class ResultLog(TopicReader):
    """Every answer on the results topic of one prefix, with the wall time it arrived."""

    topic_of = staticmethod(lambda names: names.results)
    partitions = RESULTS.partitions

    def __init__(self, settings: Settings,
                 on_answer: Callable[[str], None] | None = None) -> None:
        super().__init__(settings)
        self.arrivals: list[tuple[float, SynthesisResult]] = []
        self.first: dict[str, tuple[float, SynthesisResult]] = {}
        # request_id -> when its first answer was produced (the record's timestamp, s): the
        # arrival minus this is the answer's way back through Kafka
        self.produced_at: dict[str, float] = {}
        self._on_answer = on_answer  # a routed Load's done(): the answer is in

    def take(self, rec: ConsumerRecord[bytes, bytes], now: float) -> None:
        result = decode_result(rec.value or b"{}")
        self.arrivals.append((now, result))
        if result.request_id not in self.first:  # per worker, for CPU/request
            LEDGER.answered(result.worker)
            if self._on_answer is not None:
                self._on_answer(result.request_id)
        self.first.setdefault(result.request_id, (now, result))
        self.produced_at.setdefault(result.request_id, rec.timestamp / 1000)

    @property
    def answered(self) -> int:
        return len(self.first)

    def duplicates(self) -> int:
        return len(self.arrivals) - len(self.first)

    async def wait_for(self, wanted: set[str], timeout_s: float) -> set[str]:
        """Wait until every wanted ID is answered; returns those still missing."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            missing = wanted - self.first.keys()
            if not missing:
                return set()
            await asyncio.sleep(0.1)
        return wanted - self.first.keys()
