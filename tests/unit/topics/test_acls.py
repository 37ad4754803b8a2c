"""The ACL table names the consumer groups the processes really join.

Both sides come from one Settings: the groups a worker, a gateway and an aggregator started
with VF_TOPIC_PREFIX (and no VF_GROUP_ID / VF_GATEWAY_GROUP_ID) use, and the grants
`topics.acls.grants(role, prefix)` gives their roles. A change to either side's naming fails
here instead of as a denied JoinGroup on a prefixed cluster.
"""

from __future__ import annotations

from dataclasses import astuple

import pytest

from consumers.aggregator.app import app_id
from consumers.settings import Settings
from topics.acls import KEDA, KUBERNETES_ROLES, ROLES, Grant, grants
from topics.specs import topic_names


def _groups(role_grants: list[Grant], operation: str) -> set[str]:
    return {g.name for g in role_grants if g.resource == "group" and g.operation == operation}


@pytest.mark.parametrize("prefix", ["", "acme.", "t1-"])
def test_group_grants_follow_the_groups_the_processes_join(prefix: str) -> None:
    settings = Settings.from_env({"VF_TOPIC_PREFIX": prefix} if prefix else {})
    assert settings.kafka.topic_prefix == prefix
    worker_group, gateway_group = settings.worker.group_id, settings.gateway.group_id
    aggregator_group = app_id(settings)  # faust's app id is its consumer group
    assert _groups(grants(ROLES["worker"], prefix), "Read") == {worker_group}
    gateway = grants(ROLES["gateway"], prefix)
    assert _groups(gateway, "Read") == {gateway_group}
    # its lag check reads the worker group's committed offsets (LagSampler)
    assert _groups(gateway, "Describe") == {worker_group}
    aggregator = grants(ROLES["aggregator"], prefix)
    assert _groups(aggregator, "Read") == {aggregator_group}
    # faust names its changelog topics after the app id
    owned = {g.name for g in aggregator if g.resource == "topic" and g.pattern == "prefixed"}
    assert owned == {aggregator_group + "-"}
    assert _groups(grants(KEDA, prefix), "Describe") == {worker_group}  # the scaler's lag


@pytest.mark.parametrize("prefix", ["", "acme."])
def test_topic_grants_take_the_prefix_the_processes_use(prefix: str) -> None:
    every_topic = set(astuple(topic_names(prefix)))
    for role in (*ROLES.values(), *KUBERNETES_ROLES):
        for g in grants(role, prefix):
            if g.resource == "topic" and g.pattern == "literal":
                assert g.name in every_topic, (role.name, g)


def test_an_explicit_group_id_is_used_as_given_and_so_is_not_in_the_table() -> None:
    settings = Settings.from_env({"VF_TOPIC_PREFIX": "acme.", "VF_GROUP_ID": "mine"})
    assert settings.worker.group_id == "mine"
    assert settings.gateway.group_id == "acme.vf-gateway"
    assert "mine" not in _groups(grants(ROLES["worker"], "acme."), "Read")
