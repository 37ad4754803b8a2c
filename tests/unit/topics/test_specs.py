"""Topic specs against DESIGN.md's "Topics" table, and the drift report of `topics describe`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from topics.admin import Drift, TopicState, drift
from topics.specs import (
    ALL_TOPICS,
    DAY_MS,
    DLQ,
    REPLICATION,
    REQUESTS,
    VOICES,
    Replication,
    TopicSpec,
    replication_for,
    topic_names,
)

# DESIGN.md, "Topics": name -> (partitions, cleanup.policy, retention in days or None).
DESIGN_TOPICS = {
    "tts.requests": (12, "delete", 7),
    "tts.voices": (12, "compact", None),
    "tts.results": (12, "delete", 7),
    "tts.jobs": (12, "delete", 7),
    "tts.dlq": (3, "delete", 30),
    # DESIGN.md, "Lanes"
    "tts.requests.interactive": (12, "delete", 1),
    "tts.audio": (12, "delete", 1),
    "tts.control": (3, "delete", 1),
    # docs/contract.md, "Routing keys and the fleet view"
    "tts.fleet": (1, "compact,delete", 1),
    "tts.audit": (3, "delete", 365),
    # docs/contract.md, "Routing keys and the fleet view": the shard lanes
    "tts.requests.shards": (48, "delete", 7),
    "tts.requests.interactive.shards": (48, "delete", 1),
}
ASYNCAPI = Path(__file__).resolve().parents[3] / "docs" / "asyncapi.yaml"


def test_topic_names_partitions_and_configs_match_design() -> None:
    got = {}
    for spec in ALL_TOPICS:
        days = None if spec.retention_ms is None else spec.retention_ms / DAY_MS
        got[spec.name] = (spec.partitions, spec.cleanup_policy, days)
    assert got == DESIGN_TOPICS


def test_retention_is_in_milliseconds() -> None:
    assert REQUESTS.configs() == {"cleanup.policy": "delete", "retention.ms": "604800000"}
    assert DLQ.configs()["retention.ms"] == "2592000000"
    assert VOICES.configs() == {"cleanup.policy": "compact"}


def test_min_insync_replicas_is_only_set_when_asked() -> None:
    assert "min.insync.replicas" not in REQUESTS.configs()
    assert REQUESTS.configs(min_insync_replicas=2)["min.insync.replicas"] == "2"


def test_keys_match_design() -> None:
    assert {s.name: s.key for s in ALL_TOPICS} == {
        "tts.requests": "routing key (voice_id or voice_id#shard)", "tts.voices": "voice_id",
        "tts.results": "job.id, else request_id", "tts.jobs": "job.id",
        "tts.dlq": "original key",
        "tts.requests.interactive": "routing key (voice_id or voice_id#shard)",
        "tts.audio": "request_id", "tts.control": "request_id or job_id",
        "tts.fleet": "worker", "tts.audit": "tenant",
        "tts.requests.shards": "routing key (voice_id or voice_id#shard)",
        "tts.requests.interactive.shards": "routing key (voice_id or voice_id#shard)",
    }


@pytest.mark.parametrize("prefix", ["", "acme.", "staging-"])
def test_prefix_is_applied_to_every_topic(prefix: str) -> None:
    names = topic_names(prefix)
    assert (names.requests, names.voices, names.results, names.jobs, names.dlq,
            names.requests_interactive, names.audio, names.control, names.fleet,
            names.audit, names.requests_shards, names.requests_interactive_shards) == tuple(
        prefix + s.name for s in ALL_TOPICS)


def test_asyncapi_channels_match_the_specs() -> None:
    channels = yaml.safe_load(ASYNCAPI.read_text("utf-8"))["channels"]
    by_address = {c["address"]: c["bindings"]["kafka"] for c in channels.values()}
    assert set(by_address) == {s.name for s in ALL_TOPICS}
    for spec in ALL_TOPICS:
        binding = by_address[spec.name]
        assert binding["partitions"] == spec.partitions
        policy = binding["topicConfiguration"]["cleanup.policy"]
        assert policy == spec.cleanup_policy.split(",")
        assert binding["topicConfiguration"].get("retention.ms") == spec.retention_ms


# --- drift(): a pure function of the states read back from the cluster ----------------------


def healthy(prefix: str = "", replication_factor: int = 1) -> list[TopicState]:
    return [TopicState(prefix + s.name, True, s.partitions, replication_factor, s.configs())
            for s in ALL_TOPICS]


def with_state(states: list[TopicState], name: str, **changes: object) -> list[TopicState]:
    return [replace(s, **changes) if s.name == name else s for s in states]  # type: ignore[arg-type]


def test_no_drift_when_everything_matches() -> None:
    assert drift(healthy()) == []
    assert drift(healthy("acme."), prefix="acme.") == []


def test_extra_broker_configs_are_not_drift() -> None:
    states = [replace(s, configs={**s.configs, "segment.bytes": "1073741824"})
              for s in healthy()]
    assert drift(states) == []


def test_wrong_partition_count() -> None:
    report = drift(with_state(healthy(), "tts.requests", partitions=6))
    assert report == [Drift("tts.requests", "partitions", "12", "6")]
    assert str(report[0]) == "tts.requests: partitions is 6, spec says 12"


def test_missing_topic_absent_from_the_list() -> None:
    states = [s for s in healthy() if s.name != "tts.jobs"]
    assert drift(states) == [Drift("tts.jobs", "existence", "present", "missing")]


def test_missing_topic_reported_as_not_existing() -> None:
    states = with_state(healthy(), "tts.dlq", exists=False, partitions=0, configs={})
    # A missing topic is one line, not one per config it lacks.
    assert drift(states) == [Drift("tts.dlq", "existence", "present", "missing")]


def test_wrong_cleanup_policy() -> None:
    states = with_state(healthy(), "tts.voices", configs={"cleanup.policy": "delete"})
    assert drift(states) == [Drift("tts.voices", "cleanup.policy", "compact", "delete")]


def test_unset_retention() -> None:
    states = with_state(healthy(), "tts.dlq", configs={"cleanup.policy": "delete"})
    assert drift(states) == [Drift("tts.dlq", "retention.ms", "2592000000", "<unset>")]


def test_low_replication_factor() -> None:
    assert drift(healthy(), replication_factor=3) == [
        Drift(s.name, "replication factor", "3", "1") for s in ALL_TOPICS]
    assert drift(healthy(replication_factor=3), replication_factor=2) == []


def test_min_insync_replicas_checked_when_given() -> None:
    report = drift(healthy(), min_insync_replicas=2)
    assert report == [Drift(s.name, "min.insync.replicas", "2", "<unset>") for s in ALL_TOPICS]


def test_prefix_is_part_of_the_names_checked() -> None:
    # Unprefixed topics do not satisfy a prefixed spec.
    report = drift(healthy(), prefix="acme.")
    assert report == [Drift("acme." + s.name, "existence", "present", "missing")
                      for s in ALL_TOPICS]


def test_several_differences_are_all_reported() -> None:
    states = with_state(healthy(), "tts.results", partitions=1,
                        configs={"cleanup.policy": "compact", "retention.ms": "1"})
    assert drift(states) == [
        Drift("tts.results", "partitions", "12", "1"),
        Drift("tts.results", "cleanup.policy", "delete", "compact"),
        Drift("tts.results", "retention.ms", str(7 * DAY_MS), "1"),
    ]


def test_custom_specs() -> None:
    spec = TopicSpec("x", 2, "delete", None, "k")
    assert drift([TopicState("x", True, 2, 1, {"cleanup.policy": "delete"})],
                 specs=(spec,)) == []


def test_replication_follows_the_broker_count() -> None:
    """rf 3 / min ISR 2 on a production-sized cluster; what fits on fewer brokers, always
    leaving one broker's worth of slack where there is more than one."""
    assert replication_for(1) == Replication(1, 1)
    assert replication_for(2) == Replication(2, 1)
    assert replication_for(3) == Replication(3, 2) == REPLICATION
    assert replication_for(5) == Replication(3, 2)
    with pytest.raises(ValueError, match="at least one broker"):
        replication_for(0)


def test_a_three_broker_cluster_reports_both_replication_drifts() -> None:
    wanted = replication_for(3)
    states = [replace(s, configs={**s.configs, "min.insync.replicas": "2"})
              for s in healthy(replication_factor=3)]
    assert drift(states, replication_factor=wanted.factor,
                 min_insync_replicas=wanted.min_insync) == []
    states = with_state(states, "tts.requests", replication_factor=1,
                        configs={**REQUESTS.configs(), "min.insync.replicas": "1"})
    assert drift(states, replication_factor=wanted.factor,
                 min_insync_replicas=wanted.min_insync) == [
        Drift("tts.requests", "replication factor", "3", "1"),
        Drift("tts.requests", "min.insync.replicas", "2", "1")]
