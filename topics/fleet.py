"""Routing keys and the fleet view (DESIGN.md, "Routing keys"): the wire side of routing.

A request record's key is a routing key: `voice_id` (shard 0, what every external producer
sends) or `voice_id#<shard>` (shard 1-9999, chosen by a router). Kafka's murmur2 partitioner
turns the key into a partition as it always did; a worker reads the voice from the value,
never from the key, so any key is correct and the shard only says where the work runs.

`tts.fleet` (compacted, key = worker ID) carries one `WorkerStatus` per worker, republished
about every `interval_ms`: the partitions of each request lane it owns (the plain topic's
and the shard topic's), how much work waits
for it in each lane, its device slots per lane and the voices whose profiles it holds. A
router keeps the latest status per worker and treats one older than `stale_after_ms()` as
gone; a worker that stops cleanly writes a tombstone (null value) under its key. Two
optional counts since the worker started ride along for the console's fleet page: its profile
cache lookups (hit/store/miss) and its failed results by error code (at most one entry per
`topics.errors.ErrorCode`, so the record stays small).
"""

from __future__ import annotations

import re
from typing import Literal

import msgspec

from topics.validation import VOICE_ID_MAX, check_id

FLEET_SCHEMA = "tts.fleet.v1"
MAX_SHARD = 9999
MAX_HOT_VOICES = 256  # voices listed per status: the record stays a few KiB
STALE_INTERVALS = 3  # a status this many intervals old is a worker gone

RouteLane = Literal["batch", "interactive"]
_SHARD = re.compile(r"^(?P<voice>.+)#(?P<shard>[0-9]{1,4})$")


def routing_key(voice_id: str, shard: int = 0) -> str:
    """The record key of `voice_id`'s shard: the plain voice ID for shard 0."""
    if not 0 <= shard <= MAX_SHARD:
        raise ValueError(f"shard must be within 0-{MAX_SHARD}, got {shard}")
    return voice_id if shard == 0 else f"{voice_id}#{shard}"


def parse_routing_key(key: str) -> tuple[str, int]:
    """(voice_id, shard) of a routing key; a key without `#<digits>` is shard 0."""
    m = _SHARD.match(key)
    if m is None:
        return check_id("voice_id", key, VOICE_ID_MAX), 0
    return check_id("voice_id", m.group("voice"), VOICE_ID_MAX), int(m.group("shard"))


class LaneLoad(msgspec.Struct, omit_defaults=True, kw_only=True):
    """One lane of one worker: work waiting for it and the device slots it runs at once."""

    partitions: list[int] = msgspec.field(default_factory=list)  # of the plain lane topic
    topic_partitions: int = 0  # the lane topic's partition count (it may have been grown)
    # The lane's shard topic (tts.requests[.interactive].shards), where routers send: its
    # partitions this worker holds and the topic's count; absent from workers of before.
    shards: list[int] = msgspec.field(default_factory=list)
    shard_partitions: int = 0
    backlog: int = 0  # not yet fetched on its partitions of both topics (high watermark - position)
    queued: int = 0  # fetched, waiting in the worker's queue or for a retry
    inflight: int = 0  # on the device now
    slots: int = 1  # device calls this lane may run at once

    @property
    def load(self) -> int:
        """Requests waiting for or running on this worker in this lane."""
        return self.backlog + self.queued + self.inflight


class ProfileCounts(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A worker's voice profile lookups since it started (its vf_profile_cache_total)."""

    hit: int = 0  # found in the worker's in-process cache
    store: int = 0  # loaded from the object store
    miss: int = 0  # in neither: computed from the reference

    @property
    def lookups(self) -> int:
        return self.hit + self.store + self.miss


class WorkerStatus(msgspec.Struct, omit_defaults=True, kw_only=True, tag_field="schema",
                   tag=FLEET_SCHEMA):
    worker: str
    at_ms: int  # when it was written, epoch milliseconds
    interval_ms: int  # the next one comes within this
    lanes: dict[str, LaneLoad] = msgspec.field(default_factory=dict)  # "batch", "interactive"
    hot: list[str] = msgspec.field(default_factory=list)  # voices with a profile in RAM
    draining: bool = False  # stopping: route nothing new here
    # Since the worker started; optional, so routers of before read the record as they did.
    profiles: ProfileCounts | None = None
    errors: dict[str, int] = msgspec.field(default_factory=dict)  # ErrorCode -> results

    def stale_after_ms(self) -> int:
        return self.at_ms + STALE_INTERVALS * self.interval_ms

    def lane(self, name: str) -> LaneLoad:
        return self.lanes.get(name) or LaneLoad()


_status_encoder = msgspec.json.Encoder()


def encode_status(status: WorkerStatus) -> bytes:
    return _status_encoder.encode(status)


def decode_status(raw: bytes) -> WorkerStatus:
    """A checked status; raises msgspec.DecodeError (or ValidationError) for anything else."""
    status = msgspec.json.decode(raw, type=WorkerStatus)
    if not status.worker or status.interval_ms <= 0:
        raise msgspec.ValidationError("a fleet status names its worker and a positive interval")
    return status
