"""The topics of the contract (DESIGN.md, "Topics"): names, partitions and configs.

`TopicSpec` is the source for `topics create` and `topics describe`; a prefix
(`VF_TOPIC_PREFIX`) is applied by `topic_names()` so tenants can share a cluster.
Replication is the cluster's, not a topic's: `replication_for(brokers)` gives every topic
replication factor 3 and `min.insync.replicas` 2 on three or more brokers (an acks=all write
survives one broker down), and what fits on fewer (1 and 1 on the one-node dev stack).
"""

from __future__ import annotations

from dataclasses import dataclass

DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    cleanup_policy: str
    retention_ms: int | None
    key: str

    def configs(self, *, min_insync_replicas: int | None = None) -> dict[str, str]:
        out = {"cleanup.policy": self.cleanup_policy}
        if self.retention_ms is not None:
            out["retention.ms"] = str(self.retention_ms)
        if min_insync_replicas is not None:
            out["min.insync.replicas"] = str(min_insync_replicas)
        return out


@dataclass(frozen=True)
class Replication:
    factor: int
    min_insync: int


REPLICATION = Replication(3, 2)  # the production target (Strimzi's example cluster too)


def replication_for(brokers: int) -> Replication:
    """REPLICATION where `brokers` can hold it; else every broker a replica, and one fewer in
    sync than replicas (at least 1), so that one broker down still takes writes."""
    if brokers < 1:
        raise ValueError(f"a cluster has at least one broker, got {brokers}")
    factor = min(REPLICATION.factor, brokers)
    return Replication(factor, max(1, min(REPLICATION.min_insync, factor - 1)))


ROUTING_KEY = "routing key (voice_id or voice_id#shard)"  # topics/fleet.py
REQUESTS = TopicSpec("tts.requests", 12, "delete", 7 * DAY_MS, ROUTING_KEY)
VOICES = TopicSpec("tts.voices", 12, "compact", None, "voice_id")
RESULTS = TopicSpec("tts.results", 12, "delete", 7 * DAY_MS, "job.id, else request_id")
JOBS = TopicSpec("tts.jobs", 12, "delete", 7 * DAY_MS, "job.id")
DLQ = TopicSpec("tts.dlq", 3, "delete", 30 * DAY_MS, "original key")
# Lanes (DESIGN.md, "Lanes"): the interactive requests have tts.requests' partition count and
# keying, so a voice's two lanes share a partition number and the worker that owns it.
REQUESTS_INTERACTIVE = TopicSpec("tts.requests.interactive", REQUESTS.partitions, "delete",
                                 DAY_MS, ROUTING_KEY)
# Shard lanes (docs/routing.md, "The ceiling"): where routers (the gateway, `job run`) send, one
# per lane, wider than the plain lanes so that the fleet outgrows them: a consumer group gives
# a partition to one member, so a lane's partition count is the most workers it can feed.
# External producers keep the plain lanes; workers read all four.
SHARD_PARTITIONS = 48
REQUESTS_SHARDS = TopicSpec("tts.requests.shards", SHARD_PARTITIONS, "delete", 7 * DAY_MS,
                            ROUTING_KEY)
REQUESTS_INTERACTIVE_SHARDS = TopicSpec("tts.requests.interactive.shards", SHARD_PARTITIONS,
                                        "delete", DAY_MS, ROUTING_KEY)
AUDIO = TopicSpec("tts.audio", 12, "delete", DAY_MS, "request_id")  # binary chunks (chunks.py)
CONTROL = TopicSpec("tts.control", 3, "delete", DAY_MS, "request_id or job_id")
# Routing (topics/fleet.py): each worker's latest status; compacted, and old enough records
# of workers that never came back are deleted. One partition: every router reads it all.
FLEET = TopicSpec("tts.fleet", 1, "compact,delete", DAY_MS, "worker")
# Audit (tts.audit.v1): append-only, never compacted, kept a year; keyed by tenant so one
# tenant's trail is in order on one partition.
AUDIT = TopicSpec("tts.audit", 3, "delete", 365 * DAY_MS, "tenant")

ALL_TOPICS: tuple[TopicSpec, ...] = (REQUESTS, VOICES, RESULTS, JOBS, DLQ,
                                     REQUESTS_INTERACTIVE, AUDIO, CONTROL, FLEET, AUDIT,
                                     REQUESTS_SHARDS, REQUESTS_INTERACTIVE_SHARDS)


@dataclass(frozen=True)
class TopicNames:
    requests: str
    voices: str
    results: str
    jobs: str
    dlq: str
    requests_interactive: str
    audio: str
    control: str
    fleet: str
    audit: str
    requests_shards: str
    requests_interactive_shards: str


def topic_names(prefix: str = "") -> TopicNames:
    return TopicNames(
        requests=prefix + REQUESTS.name,
        voices=prefix + VOICES.name,
        results=prefix + RESULTS.name,
        jobs=prefix + JOBS.name,
        dlq=prefix + DLQ.name,
        requests_interactive=prefix + REQUESTS_INTERACTIVE.name,
        audio=prefix + AUDIO.name,
        control=prefix + CONTROL.name,
        fleet=prefix + FLEET.name,
        audit=prefix + AUDIT.name,
        requests_shards=prefix + REQUESTS_SHARDS.name,
        requests_interactive_shards=prefix + REQUESTS_INTERACTIVE_SHARDS.name,
    )
