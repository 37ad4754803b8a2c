"""Reply routing: each gateway replica reads only its own partitions of tts.audio.

Which partitions: every replica is a member of consumer group `vf-gateway` (VF_GATEWAY_GROUP_ID)
subscribed to tts.audio, so Kafka hands each replica a disjoint share of the partitions and
moves them when replicas come and go; no replica reads the whole stream, and none reads
tts.results. Nothing is committed: a partition's position is set to its end when it is
assigned (`auto_offset_reset=latest`) and resolved *before* the partition is offered to
requests, so every chunk of a request produced afterwards is read.

Per request: `register(request_ids)` -> a reply partition of this replica (round robin) that
the app names in the request record's `vf-reply-partition` header -> the worker writes every
chunk of the request there -> the fetch loop decodes each record (`topics.chunks.read_chunk`)
and puts it on the queue of its request ID (records of other replicas' requests on a shared
partition, or of requests no longer waited for, are dropped) -> `ReplyStream` orders them.

A rebalance that takes a partition away while requests still wait on it: the revoked
partition's position is noted and a group-less "drain" consumer reads it from there until
those requests end, so a scale-up never strands an answer. The duplicate records this may
deliver (the partition's new owner drops them; a later reassignment back to us reads them
again) are dropped by `ReplyStream` by (attempt, seq).

A chunk the fetch loop never saw (whatever the cause: a position resolved past it across a
rebalance, a drain that could not start): `ReplyStream` sees a `seq` beyond the next one it
expects, holds what came early and calls `repair(request_id)`, which re-reads the request's
partition from the offset this replica had read to when the request was registered (its
chunks can only come after it) and hands the request its records again. A final record
never ends a stream with a hole in it: the answer is whole, or it times out.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from consumers import startup
from consumers.kafka import make_consumer
from consumers.settings import KafkaSettings
from topics.chunks import AudioChunk, InvalidChunk, read_chunk

log = logging.getLogger(__name__)


@dataclass
class _Waiter:
    partition: int
    queue: asyncio.Queue[AudioChunk] = field(default_factory=asyncio.Queue)
    chunks: int = 0  # records read for it so far (the failover asks)
    since: int | None = None  # the partition's read offset when registered (repair reads on)
    repairing: bool = False


class NoReplyPartition(RuntimeError):
    """This replica holds no partition of tts.audio yet (starting, or more replicas than
    partitions): the app answers 503."""


class ReplyRouter:
    def __init__(self, kafka: KafkaSettings, topic: str, *, group_id: str) -> None:
        self._kafka = kafka
        self._topic = topic
        self._group_id = group_id
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._drains: set[asyncio.Task[None]] = set()
        self._waiters: dict[str, _Waiter] = {}
        self._ready: list[int] = []  # assigned partitions whose position is resolved
        self._pending: set[TopicPartition] = set()
        self._read_to: dict[int, int] = {}  # partition -> next offset the fetch loop reads
        self._turn = itertools.count()
        self.repairs = 0

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        self._consumer = make_consumer(
            self._kafka, group_id=self._group_id, enable_auto_commit=False,
            auto_offset_reset="latest",
            fetch_max_wait_ms=20)  # a chunk waits at most 20 ms in the broker for company
        self._consumer.subscribe([self._topic], listener=_Listener(self))
        await self._consumer.start()
        self._task = startup.watch(asyncio.create_task(self._run(), name="gateway-replies"),
                                   logger=log, what="reply fetch loop")

    async def stop(self) -> None:
        for task in [*self._drains, *([self._task] if self._task else [])]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    @property
    def partitions(self) -> list[int]:
        return sorted(self._ready)

    @property
    def consumer(self) -> AIOKafkaConsumer | None:
        return self._consumer

    # -- requests ------------------------------------------------------------------------------
    def register(self, request_ids: list[str]) -> int:
        if not self._ready:
            raise NoReplyPartition("no tts.audio partition assigned to this replica yet")
        partition = self._ready[next(self._turn) % len(self._ready)]
        since = self._read_to.get(partition)
        for request_id in request_ids:
            self._waiters[request_id] = _Waiter(partition, since=since)
        return partition

    def unregister(self, request_ids: list[str]) -> None:
        for request_id in request_ids:
            self._waiters.pop(request_id, None)

    def queue(self, request_id: str) -> asyncio.Queue[AudioChunk]:
        return self._waiters[request_id].queue

    def waiting(self) -> int:
        return len(self._waiters)

    def chunks_of(self, request_id: str) -> int:
        """Chunk records read for a waited-for request (0 for one not waited for)."""
        waiter = self._waiters.get(request_id)
        return waiter.chunks if waiter is not None else 0

    # -- reading -------------------------------------------------------------------------------
    async def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while True:
            try:
                await self._resolve_pending(consumer)
                batches = await consumer.getmany(timeout_ms=200)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("reply fetch failed; retrying", exc_info=True)
                await asyncio.sleep(0.5)
                continue
            for records in batches.values():
                self._dispatch(records)
                if records:
                    last = records[-1]
                    self._read_to[last.partition] = max(self._read_to.get(last.partition, 0),
                                                        last.offset + 1)

    async def _resolve_pending(self, consumer: AIOKafkaConsumer) -> None:
        for tp in list(self._pending):
            # the end offset, fetched now: later chunks are read
            self._read_to[tp.partition] = await consumer.position(tp)
            self._pending.discard(tp)
            if tp.partition not in self._ready:
                self._ready.append(tp.partition)
        if self._pending == set() and self._ready:
            self._ready.sort()

    def _dispatch(self, records: list[Any]) -> None:
        for record in records:
            waiter = self._waiters.get(record.key.decode("utf-8", "replace")) \
                if record.key else None
            if waiter is None:
                continue  # another replica's request on a shared partition, or one given up
            try:
                chunk = read_chunk(record.key, record.value, list(record.headers))
            except InvalidChunk as exc:
                log.warning("tts.audio record at %d/%d skipped: %s", record.partition,
                            record.offset, exc)
                continue
            waiter.chunks += 1
            waiter.queue.put_nowait(chunk)

    # -- rebalances ------------------------------------------------------------------------------
    def assigned(self, tps: set[TopicPartition]) -> None:
        self._pending |= {tp for tp in tps if tp.topic == self._topic}
        log.info("reply partitions assigned: %s", sorted(tp.partition for tp in tps))

    async def revoked(self, tps: set[TopicPartition]) -> None:
        gone = {tp.partition for tp in tps}
        self._ready = [p for p in self._ready if p not in gone]
        self._pending -= tps
        busy = {w.partition for w in self._waiters.values()} & gone
        if not busy or self._consumer is None:
            return
        starts: dict[TopicPartition, int] = {}
        for p in busy:
            tp = TopicPartition(self._topic, p)
            try:
                starts[tp] = await self._consumer.position(tp)
            except Exception:  # no position now: from where its oldest waiter began
                oldest = [w.since for w in self._waiters.values()
                          if w.partition == p and w.since is not None]
                if oldest:
                    starts[tp] = min(oldest)
        log.info("reply partitions %s revoked with requests waiting: draining them", sorted(busy))
        task = startup.watch(asyncio.create_task(self._drain(starts)), logger=log,
                             what=f"drain of revoked reply partitions {sorted(busy)}")
        self._drains.add(task)
        task.add_done_callback(self._drains.discard)

    async def _drain(self, starts: dict[TopicPartition, int]) -> None:
        consumer = make_consumer(self._kafka, group_id=None, enable_auto_commit=False,
                                 fetch_max_wait_ms=20)
        await consumer.start()
        try:
            consumer.assign(list(starts))
            for tp, offset in starts.items():
                consumer.seek(tp, offset)
            partitions = {tp.partition for tp in starts}
            while any(w.partition in partitions for w in self._waiters.values()):
                batches = await consumer.getmany(timeout_ms=200)
                for records in batches.values():
                    self._dispatch(records)
        finally:
            await consumer.stop()

    def repair(self, request_id: str) -> None:
        """`request_id`'s stream found a hole: read its partition again from where this
        replica stood when the request was registered, handing it only its own records,
        until it stops waiting. One re-read per request at a time."""
        waiter = self._waiters.get(request_id)
        if waiter is None or waiter.since is None or waiter.repairing:
            return
        waiter.repairing = True
        self.repairs += 1
        log.warning("reply stream of %s missed chunks: reading partition %d again from %d",
                    request_id, waiter.partition, waiter.since,
                    extra={"request_id": request_id})
        task = startup.watch(asyncio.create_task(self._reread(request_id, waiter)),
                             logger=log, what=f"re-read of the replies of {request_id}")
        self._drains.add(task)
        task.add_done_callback(self._drains.discard)

    async def _reread(self, request_id: str, waiter: _Waiter) -> None:
        assert waiter.since is not None
        consumer = make_consumer(self._kafka, group_id=None, enable_auto_commit=False,
                                 fetch_max_wait_ms=20)
        await consumer.start()
        try:
            tp = TopicPartition(self._topic, waiter.partition)
            consumer.assign([tp])
            consumer.seek(tp, waiter.since)
            while self._waiters.get(request_id) is waiter:
                batches = await consumer.getmany(timeout_ms=200)
                for records in batches.values():
                    self._dispatch([r for r in records if r.key == request_id.encode()])
        finally:
            waiter.repairing = False
            await consumer.stop()


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, router: ReplyRouter) -> None:
        self._router = router

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._router.revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._router.assigned(set(assigned))


@dataclass
class Piece:
    pcm: bytes
    sample_rate: int


@dataclass
class ReplyStream:
    """One request's chunks in order: restarts handled, duplicates dropped, holes repaired,
    final noted.

    A new `attempt` (the worker restarted the request) replaces what came before, and the
    replaced attempt's late records are dropped. Bytes already passed on cannot be taken
    back from an HTTP client, so the new attempt's first `sent` bytes are skipped and the
    answer continues from there: seamless for the deterministic engines (espeak, bench), a
    possible seam for sampling ones. A record past the next expected `seq` (records were
    missed) is held until the hole is filled, and `on_gap` asks for the request's records
    again (ReplyRouter.repair); the final record counts only once everything before it came.
    """

    request_id: str
    queue: asyncio.Queue[AudioChunk]
    timeout_s: float
    on_gap: Callable[[], None] | None = None
    status: str | None = None
    error: str | None = None
    restarts: int = 0
    _attempt: str | None = None
    _next_seq: int = 0
    _sent: int = 0
    _skip: int = 0
    _held: dict[int, AudioChunk] = field(default_factory=dict)
    _replaced: set[str] = field(default_factory=set)

    async def pieces(self) -> AsyncIterator[Piece]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while self.status is None:
            remaining = deadline - loop.time()
            if remaining <= 0:
                missing = f" (held {len(self._held)} records past seq {self._next_seq})" \
                    if self._held else ""
                raise TimeoutError(f"no final chunk for {self.request_id} within "
                                   f"{self.timeout_s:.0f} s{missing}")
            try:
                chunk = await asyncio.wait_for(self.queue.get(), remaining)
            except TimeoutError:
                continue
            for ready in self._in_order(chunk):
                piece = self._take(ready)
                if piece is not None:
                    yield piece
                if self.status is not None:
                    break

    def _in_order(self, chunk: AudioChunk) -> list[AudioChunk]:
        """The records `chunk` lets out, in seq order: none (a duplicate, a replaced
        attempt's, one held past a hole), itself, or itself and the held ones it unblocks."""
        if chunk.attempt in self._replaced:
            return []  # a replaced attempt's late record
        if chunk.attempt != self._attempt:
            if self._attempt is not None and chunk.final and chunk.status == "succeeded" \
                    and chunk.seq == 0:
                return []  # an attempt with no audio cannot replace one that has it
            if self._attempt is not None:
                self.restarts += 1
                self._skip = self._sent
                self._replaced.add(self._attempt)
            self._attempt, self._next_seq = chunk.attempt, 0
            self._held.clear()
        if chunk.seq < self._next_seq:
            return []  # a duplicate delivery
        if chunk.seq > self._next_seq:
            if not self._held and self.on_gap is not None:
                self.on_gap()
            self._held[chunk.seq] = chunk
            return []
        out = [chunk]
        seq = chunk.seq + 1
        while seq in self._held:
            out.append(self._held.pop(seq))
            seq += 1
        return out

    def _take(self, chunk: AudioChunk) -> Piece | None:
        """The next record in order: its bytes not yet sent, and the status if final."""
        self._next_seq = chunk.seq + 1
        if chunk.final:
            self.status = chunk.status or "failed"
            self.error = chunk.error
        data = chunk.data
        if self._skip:
            cut = min(self._skip, len(data))
            data, self._skip = data[cut:], self._skip - cut
        if not data:
            return None
        self._sent += len(data)
        return Piece(data, chunk.sample_rate)
