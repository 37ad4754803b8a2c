"""Create and verify the contract's topics (`voicefactory topics create|describe`).

create: every `TopicSpec` with the prefix, partitions, cleanup policy and retention;
existing topics are left alone (and then checked). describe: reads partitions and configs
back from the cluster and returns one `Drift` per difference from the spec, replication
factor and `min.insync.replicas` included (`replication()` derives both from the broker
count unless the caller names them).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from topics.specs import (
    ALL_TOPICS,
    REQUESTS,
    REQUESTS_INTERACTIVE,
    REQUESTS_INTERACTIVE_SHARDS,
    REQUESTS_SHARDS,
    Replication,
    TopicSpec,
    replication_for,
)

log = logging.getLogger(__name__)
_TOPIC_ALREADY_EXISTS = 36
_UNKNOWN_TOPIC = 3


@dataclass(frozen=True)
class TopicState:
    name: str
    exists: bool
    partitions: int
    replication_factor: int
    configs: dict[str, str]


@dataclass(frozen=True)
class Drift:
    topic: str
    field: str
    expected: str
    actual: str

    def __str__(self) -> str:
        return f"{self.topic}: {self.field} is {self.actual}, spec says {self.expected}"


def admin_client(bootstrap: str, **security: Any) -> AIOKafkaAdminClient:
    return AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="voicefactory-admin",
                               request_timeout_ms=15000, **security)


async def replication(admin: AIOKafkaAdminClient, *, factor: int | None = None,
                      min_insync: int | None = None) -> tuple[Replication, int]:
    """The replication the topics should have on this cluster (from its broker count, each
    part overridable), and the broker count."""
    brokers = len((await admin.describe_cluster())["brokers"])
    derived = replication_for(brokers)
    return Replication(factor or derived.factor, min_insync or derived.min_insync), brokers


async def create_topics(admin: AIOKafkaAdminClient, *, prefix: str = "",
                        replication_factor: int = 1, min_insync_replicas: int | None = None,
                        specs: tuple[TopicSpec, ...] = ALL_TOPICS) -> list[str]:
    """Create missing topics; returns the names created this call."""
    existing = set(await admin.list_topics())
    missing = [spec for spec in specs if prefix + spec.name not in existing]
    if not missing:
        return []
    new = [
        NewTopic(prefix + spec.name, spec.partitions, replication_factor,
                 topic_configs=spec.configs(min_insync_replicas=min_insync_replicas))
        for spec in missing
    ]
    response = await admin.create_topics(new)
    created = []
    for name, code, *rest in response.topic_errors:
        if code not in (0, _TOPIC_ALREADY_EXISTS):
            message = rest[0] if rest else ""
            raise RuntimeError(f"creating topic {name} failed: error {code} {message}")
        if code == 0:
            created.append(name)
    # The controller has them; wait until the broker's metadata cache does too, so that a
    # describe or produce right after this call sees the topics.
    deadline = asyncio.get_running_loop().time() + 15.0
    while created and asyncio.get_running_loop().time() < deadline:
        metadata = await admin.describe_topics(created)
        if all(_serving(t) for t in metadata):
            break
        await asyncio.sleep(0.1)
    log.info("created topics %s", created)
    return created


async def describe_topics(admin: AIOKafkaAdminClient, *, prefix: str = "",
                          specs: tuple[TopicSpec, ...] = ALL_TOPICS) -> list[TopicState]:
    names = [prefix + spec.name for spec in specs]
    metadata = await _settled_metadata(admin, names)
    present = [n for n in names if metadata.get(n, {}).get("error_code", _UNKNOWN_TOPIC) == 0]
    configs: dict[str, dict[str, str]] = {n: {} for n in names}
    if present:
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, n) for n in present])
        for response in responses:
            for resource in response.to_object()["resources"]:
                configs[resource["resource_name"]] = {
                    entry["config_names"]: entry["config_value"]
                    for entry in resource["config_entries"]
                }
    states = []
    for name in names:
        topic = metadata.get(name)
        if name not in present or topic is None:
            states.append(TopicState(name, False, 0, 0, {}))
            continue
        partitions = topic["partitions"]
        replicas = min((len(p["replicas"]) for p in partitions), default=0)
        states.append(TopicState(name, True, len(partitions), replicas, configs[name]))
    return states


def _serving(topic: dict[str, Any]) -> bool:
    """The topic exists and every partition has a leader."""
    return bool(topic["error_code"] == 0 and all(p["leader"] >= 0 for p in topic["partitions"]))


async def _settled_metadata(admin: AIOKafkaAdminClient, names: list[str],
                            timeout_s: float = 10.0) -> dict[str, Any]:
    """Topic metadata once every topic either exists with leaders or is unknown.

    Just after creation a topic answers LEADER_NOT_AVAILABLE for a moment; reading it as
    "missing" would report drift that is not there.
    """
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        metadata = {t["topic"]: t for t in await admin.describe_topics(names)}
        settling = [n for n, t in metadata.items()
                    if not (_serving(t) or t["error_code"] == _UNKNOWN_TOPIC)]
        if not settling or asyncio.get_running_loop().time() > deadline:
            return metadata
        await asyncio.sleep(0.2)


# The request lanes may be grown past their spec (`topics grow`), a pair at a time so that a
# voice's two lanes stay on one partition number: the plain lanes (where a plain voice_id key
# lands) or the shard lanes (where routers send: the fleet's ceiling is their partition count).
LANE_PAIRS = {"plain": (REQUESTS.name, REQUESTS_INTERACTIVE.name),
              "shards": (REQUESTS_SHARDS.name, REQUESTS_INTERACTIVE_SHARDS.name)}
GROWABLE = LANE_PAIRS["plain"] + LANE_PAIRS["shards"]


async def grow_request_lanes(admin: AIOKafkaAdminClient, *, prefix: str = "",
                             partitions: int, lanes: str = "plain") -> list[str]:
    """Give one pair of request lanes (LANE_PAIRS) `partitions` partitions (never fewer than
    they have: Kafka cannot shrink a topic); returns the topics grown. Records already on
    them stay where they are; new records of a plain voice_id key may land elsewhere (colder
    caches for a while, nothing lost), routed ones follow the workers' new assignment."""
    if lanes not in LANE_PAIRS:
        raise ValueError(f"lanes must be one of {', '.join(LANE_PAIRS)}, got {lanes!r}")
    pair = LANE_PAIRS[lanes]
    names = [prefix + name for name in pair]
    states = {s.name: s for s in await describe_topics(
        admin, prefix=prefix, specs=tuple(s for s in ALL_TOPICS if s.name in pair))}
    missing = [n for n in names if not states[n].exists]
    if missing:
        raise RuntimeError(f"topic(s) {', '.join(missing)} not found; run `topics create`")
    smaller = [n for n in names if states[n].partitions > partitions]
    if smaller:
        raise ValueError(f"{', '.join(smaller)} already has more than {partitions} "
                         f"partitions; Kafka cannot take partitions away")
    todo = [n for n in names if states[n].partitions < partitions]
    if todo:
        response = await admin.create_partitions(
            {n: NewPartitions(total_count=partitions) for n in todo})
        for name, code, message in response.topic_errors:
            if code != 0:
                raise RuntimeError(f"growing {name} failed: error {code} {message}")
    return todo


def drift(states: list[TopicState], *, prefix: str = "", replication_factor: int = 1,
          min_insync_replicas: int | None = None,
          specs: tuple[TopicSpec, ...] = ALL_TOPICS) -> list[Drift]:
    by_name = {s.name: s for s in states}
    out: list[Drift] = []
    for spec in specs:
        name = prefix + spec.name
        state = by_name.get(name)
        if state is None or not state.exists:
            out.append(Drift(name, "existence", "present", "missing"))
            continue
        grown = spec.name in GROWABLE and state.partitions > spec.partitions
        if state.partitions != spec.partitions and not grown:
            out.append(Drift(name, "partitions", str(spec.partitions), str(state.partitions)))
        if state.replication_factor < replication_factor:
            out.append(Drift(name, "replication factor", str(replication_factor),
                             str(state.replication_factor)))
        for key, expected in spec.configs(min_insync_replicas=min_insync_replicas).items():
            actual = state.configs.get(key, "<unset>")
            if actual != expected:
                out.append(Drift(name, key, expected, actual))
    return out
