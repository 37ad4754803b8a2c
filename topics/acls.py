"""Who may touch which topic and group: one principal per role, least privilege.

    ROLES (this file) --grants(prefix)--> (resource, name, pattern, operation) tuples
        --> deploy/local/security.py (CreateAcls on the local three-node cluster)
        --> deploy/checks/strimzi.py (the prod overlay's Strimzi KafkaUser resources, with
            KUBERNETES_ROLES: KEDA's lag reader and the topics Job, which the local cluster
            leaves to its admin)

Read means READ (which implies DESCRIBE) on the topic; write means WRITE. Producers are
idempotent (consumers/kafka.py make_producer) but use no transactional id: since Kafka 3.0
(KIP-679) WRITE on a topic is enough for InitProducerId, so no role holds the cluster's
IDEMPOTENT_WRITE. Groups are READ (join, commit); `describe_groups` is DESCRIBE only (read
another group's committed offsets: the gateway's lag check on vf-synth). The admin role is a
super user on the cluster and needs no ACL.

Every name here takes VF_TOPIC_PREFIX, the groups included: they are the defaults of
VF_GROUP_ID (vf-synth), VF_GATEWAY_GROUP_ID (vf-gateway) and the aggregator's faust app id
(vf-aggregator), which consumers/settings.py (`with_prefixed_groups`) and
consumers/aggregator/app.py (`app_id`) prefix the same way; tests/unit/topics/test_acls.py
derives both sides from one Settings so they cannot drift. A VF_GROUP_ID or
VF_GATEWAY_GROUP_ID that is set explicitly is used as given and needs its own ACL.
"""

from __future__ import annotations

from dataclasses import dataclass

from topics.specs import (
    AUDIO,
    AUDIT,
    CONTROL,
    DLQ,
    FLEET,
    JOBS,
    REQUESTS,
    REQUESTS_INTERACTIVE,
    REQUESTS_INTERACTIVE_SHARDS,
    REQUESTS_SHARDS,
    RESULTS,
    VOICES,
)


@dataclass(frozen=True)
class Role:
    name: str
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()  # READ; each name takes VF_TOPIC_PREFIX, as the groups do
    describe_groups: tuple[str, ...] = ()
    # topics whose names start with one of these: create, read, write and configure them
    # (faust's changelog and repartition topics, named after its app id)
    owned_topic_prefixes: tuple[str, ...] = ()
    describe: tuple[str, ...] = ()  # topics: metadata and end offsets only
    # topics whose names start with one of these: create, grow, describe and configure
    configure_topic_prefixes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Grant:
    resource: str  # "topic" | "group"
    name: str
    pattern: str  # "literal" | "prefixed"
    operation: str  # Read, Write, Describe, Create, Alter, DescribeConfigs, AlterConfigs


# The groups' unprefixed names: the defaults of VF_GROUP_ID and VF_GATEWAY_GROUP_ID
# (consumers/settings.py) and the aggregator's APP_ID (consumers/aggregator/app.py).
SYNTH_GROUP = "vf-synth"
GATEWAY_GROUP = "vf-gateway"
AGGREGATOR_GROUP = "vf-aggregator"

WORKER = Role(
    "worker",
    # requests of both lanes, cancels, and the fleet view its overflow router reads
    read=(REQUESTS.name, REQUESTS_INTERACTIVE.name, REQUESTS_SHARDS.name,
          REQUESTS_INTERACTIVE_SHARDS.name, CONTROL.name, FLEET.name),
    # results, dead letters, streamed chunks, its status, and overflow forwarded to a peer
    write=(RESULTS.name, DLQ.name, AUDIO.name, FLEET.name, REQUESTS.name,
           REQUESTS_INTERACTIVE.name, REQUESTS_SHARDS.name, REQUESTS_INTERACTIVE_SHARDS.name),
    groups=(SYNTH_GROUP,),
)
GATEWAY = Role(
    "gateway",
    # replies (chunks, results), job progress, the fleet view it routes by
    read=(AUDIO.name, RESULTS.name, JOBS.name, FLEET.name),
    # requests of both lanes, cancels, voice events, and the audit of what its keys did
    write=(REQUESTS.name, REQUESTS_INTERACTIVE.name, REQUESTS_SHARDS.name,
           REQUESTS_INTERACTIVE_SHARDS.name, CONTROL.name, VOICES.name, AUDIT.name),
    groups=(GATEWAY_GROUP,),
    describe_groups=(SYNTH_GROUP,),
)
AGGREGATOR = Role(
    "aggregator",
    read=(RESULTS.name,),
    write=(JOBS.name,),
    groups=(AGGREGATOR_GROUP,),
    owned_topic_prefixes=(AGGREGATOR_GROUP + "-",),
)
ADMIN = Role("admin")  # super user: topics create|describe|grow, the CLI's clients

ROLES: dict[str, Role] = {r.name: r for r in (WORKER, GATEWAY, AGGREGATOR, ADMIN)}
SUPER_USER = ADMIN.name

# In Kubernetes no process is a super user: KEDA reads vf-synth's lag, the topics Job
# creates and checks the contract's topics (`topics create`), nothing more.
KEDA = Role("keda", describe=(REQUESTS.name, REQUESTS_INTERACTIVE.name, REQUESTS_SHARDS.name,
                              REQUESTS_INTERACTIVE_SHARDS.name),
            describe_groups=(SYNTH_GROUP,))
TOPICS_JOB = Role("topics", configure_topic_prefixes=("tts.",))
KUBERNETES_ROLES: tuple[Role, ...] = (WORKER, GATEWAY, AGGREGATOR, KEDA, TOPICS_JOB)

_OWNED_OPERATIONS = ("Create", "Read", "Write", "Describe", "DescribeConfigs", "AlterConfigs")
_CONFIGURE_OPERATIONS = ("Create", "Alter", "Describe", "DescribeConfigs", "AlterConfigs")


def grants(role: Role, prefix: str = "") -> list[Grant]:
    """The ACLs `role` needs with topic and group names under `prefix` (VF_TOPIC_PREFIX):
    the groups are named as a process started with that prefix and no VF_GROUP_ID /
    VF_GATEWAY_GROUP_ID names them (Settings.with_prefixed_groups, the aggregator's app_id)."""
    out: list[Grant] = []
    out += [Grant("topic", prefix + t, "literal", "Read") for t in role.read]
    out += [Grant("topic", prefix + t, "literal", "Write") for t in role.write]
    out += [Grant("group", prefix + g, "literal", "Read") for g in role.groups]
    out += [Grant("group", prefix + g, "literal", "Describe") for g in role.describe_groups]
    out += [Grant("topic", prefix + t, "literal", "Describe") for t in role.describe]
    for owned in role.owned_topic_prefixes:
        out += [Grant("topic", prefix + owned, "prefixed", op) for op in _OWNED_OPERATIONS]
    for configured in role.configure_topic_prefixes:
        out += [Grant("topic", prefix + configured, "prefixed", op)
                for op in _CONFIGURE_OPERATIONS]
    return out
