"""The two request lanes on the worker (DESIGN.md, "Lanes"): which topic is which lane, when
a lane's partitions are paused, the interactive lane's default deadline, and the assignor.

    tts.requests.interactive + tts.requests  (plain lanes: external producers' voice_id keys)
    + tts.requests.interactive.shards + tts.requests.shards  (shard lanes: where routers send)
        (one subscription, one group; each pair shares its partition count)
        --lane_of(record.topic)--> InFlightRequest.lane --> VoiceBatcher (interactive first,
        batch keeps its minimum share: batching.ShareRule)
    fetch loop, every round: paused_partitions(assignment, queue depths) -> consumer.pause
        for those, consumer.resume for the others

Pausing is per lane. A lane's partitions pause when its own queue is at capacity, so a full
batch backlog never keeps an interactive request on the broker. Batch partitions also pause
while interactive work waits, as long as the batch lane already holds enough for its minimum
share (`max_batch` items; with a share of 0, always): then the backlog stops growing while
callers wait, and fetching resumes as soon as the interactive queue is empty.

Co-partitioning: a voice's two lanes share a partition number (same count, same key); the
range assignor gives every member the same partition numbers of every topic its members all
subscribe to with equal counts, so both lanes of a voice land on one worker. Round-robin and
sticky do not promise that: `check_assignor` warns. The shard lanes are a second such pair,
wider (48 partitions by default): a member beyond the plain lanes' partition count owns shard
partitions only, and answers what routers send it there (docs/routing.md, "The ceiling").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from aiokafka import ConsumerRecord, TopicPartition

from consumers.kafka import assignors, make_consumer
from consumers.metrics import WorkerMetrics
from consumers.worker.batching import LANES, Lane, VoiceBatcher
from consumers.worker.inflight import InFlightRequest
from topics.events import SynthesisRequest
from topics.specs import TopicNames

log = logging.getLogger(__name__)

CO_PARTITIONING_ASSIGNORS = ("range",)


def lane_topics(names: TopicNames) -> list[str]:
    """What the worker subscribes to, interactive first, then the shard lanes."""
    return [names.requests_interactive, names.requests, names.requests_interactive_shards,
            names.requests_shards]


class MissingTopics(RuntimeError):
    """A topic the worker reads does not exist: say which, and how to make it."""


async def check_topics(consumer: Any, names: TopicNames) -> None:
    """Before joining the group: every request lane must exist (a cluster that predates the
    interactive lane or the shard lanes lacks some), else the worker would stop on an
    unnamed broker error."""
    existing = await consumer.topics()
    missing = [t for t in lane_topics(names) if t not in existing]
    if missing:
        raise MissingTopics(f"topic(s) {', '.join(missing)} not found on the broker; run "
                            f"`voicefactory topics create` (it adds the missing ones), or, on "
                            f"a cluster with ACLs, grant this principal the worker role's ACLs "
                            f"on them (a topic it may not describe looks missing)")


def lane_of(topic: str, names: TopicNames) -> Lane:
    interactive = (names.requests_interactive, names.requests_interactive_shards)
    return "interactive" if topic in interactive else "batch"


def is_shard_lane(topic: str, names: TopicNames) -> bool:
    return topic in (names.requests_shards, names.requests_interactive_shards)


def paused_partitions(assignment: Iterable[TopicPartition], names: TopicNames, *,
                      interactive_queued: int, batch_queued: int, capacity: int,
                      batch_floor: int) -> set[TopicPartition]:
    """The assigned partitions to keep paused this round (the rest are resumed).

    `*_queued` count a lane's waiting requests (retry timers included by the caller);
    `batch_floor` is how many queued batch requests keep its minimum share fed while
    interactive work waits (0: strict priority, pause batch whenever interactive waits).
    """
    pause_interactive = interactive_queued >= capacity
    pause_batch = batch_queued >= capacity or (interactive_queued > 0
                                               and batch_queued >= batch_floor)
    out: set[TopicPartition] = set()
    for tp in assignment:
        lane = lane_of(tp.topic, names)
        if (pause_interactive if lane == "interactive" else pause_batch):
            out.add(tp)
    return out


def apply_pauses(consumer: Any, names: TopicNames, *, interactive_queued: int,
                 batch_queued: int, capacity: int, batch_floor: int) -> int:
    """Pause what `paused_partitions` says, resume the rest; the number now paused."""
    pause = paused_partitions(consumer.assignment(), names, capacity=capacity,
                              interactive_queued=interactive_queued,
                              batch_queued=batch_queued, batch_floor=batch_floor)
    if pause:
        consumer.pause(*pause)
    resume = consumer.paused() - pause
    if resume:
        consumer.resume(*resume)
    return len(pause)


def report_depth(metrics: WorkerMetrics, batcher: VoiceBatcher[Any]) -> None:
    metrics.set_queue_depth(batcher.qsize())
    for lane in LANES:
        metrics.set_lane_depth(lane, batcher.qsize(lane))


def observe_waits(metrics: WorkerMetrics, taken: Iterable[InFlightRequest]) -> None:
    """Queued -> taken by a dispatcher, per lane, for the requests of one batch."""
    now = time.monotonic()
    for req in taken:
        metrics.observe_lane_wait(req.lane, now - req.queued_at)


def in_flight(rec: ConsumerRecord[bytes, bytes], tp: TopicPartition,
              request: SynthesisRequest, names: TopicNames, deadline_s: float) -> InFlightRequest:
    """A decoded request as the worker tracks it: its lane from the record's topic, the
    record's broker time as when it was received, the interactive lane's default deadline."""
    stamp = datetime.fromtimestamp(rec.timestamp / 1000, UTC)
    lane = lane_of(rec.topic, names)
    return InFlightRequest(rec, tp, with_lane_deadline(request, lane, stamp, deadline_s), stamp,
                           lane=lane)


def with_lane_deadline(request: SynthesisRequest, lane: Lane, received: datetime,
                       default_s: float) -> SynthesisRequest:
    """An interactive request without a deadline gets `received + default_s` (0: none), so a
    caller who hung up long ago is not synthesized for; the processor answers it `expired`."""
    if lane != "interactive" or default_s <= 0 or request.deadline is not None:
        return request
    deadline = (received + timedelta(seconds=default_s)).isoformat(timespec="milliseconds")
    return msgspec.structs.replace(request, deadline=deadline.replace("+00:00", "Z"))


def group_consumer(settings: Any) -> Any:
    """The worker's member of its group, subscribed later to both lanes (`settings` is a
    Settings): manual commits, static membership when VF_INSTANCE_ID is set, and metadata
    refreshed every 15 s so request lanes grown by `topics grow` are taken that soon."""
    s = settings.worker
    return make_consumer(
        settings.kafka, group_id=s.group_id, enable_auto_commit=False,
        auto_offset_reset="earliest", group_instance_id=s.instance_id or None,
        session_timeout_ms=s.session_timeout_ms,
        heartbeat_interval_ms=min(3000, s.session_timeout_ms // 3),
        max_poll_interval_ms=600_000, partition_assignment_strategy=assignors(s.assignor),
        metadata_max_age_ms=15_000)


def check_assignor(name: str) -> bool:
    """True when `name` co-partitions the lanes; otherwise a warning says what is lost."""
    if name in CO_PARTITIONING_ASSIGNORS:
        return True
    log.warning("VF_ASSIGNOR=%s does not keep a voice's two lanes on one worker (range "
                "does): results stay correct, but interactive requests of a voice may be "
                "served by a worker without its profile cached and without its batch backlog "
                "to pause", name)
    return False
