"""The prod overlay's Strimzi resources, generated from the contract: a KafkaTopic per topic
spec and a KafkaUser (SCRAM-SHA-512, simple authorization) per role.

Data flow: topics/specs.py (names, partitions, cleanup, retention; REPLICATION: 3 replicas,
min.insync.replicas 2) and topics/acls.py (KUBERNETES_ROLES and their grants) -> `render()`
-> deploy/k8s/overlays/prod/strimzi.yaml byte for byte. `sync()` writes it (`python -m
deploy.checks sync-strimzi`), `drift()` says whether the committed file is stale, so the
ACLs the operator applies are the ones the local cluster's tests ran under.

The resources name the Strimzi cluster `vf` (label `strimzi.io/cluster`), whose Entity
Operator must watch the VoiceFactory namespace (docs/operations.md). A KafkaUser `vf-ROLE`
is the principal `User:vf-ROLE`; the User Operator writes its password to the Secret of the
same name, which the role's pods read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from topics.acls import KUBERNETES_ROLES, Grant, Role, grants
from topics.specs import ALL_TOPICS, REPLICATION

__all__ = ["CLUSTER", "drift", "render", "resources", "sync", "user_name"]

CLUSTER = "vf"
HEADER = ("# GENERATED from topics/specs.py and topics/acls.py by `python -m deploy.checks "
          "sync-strimzi`;\n# edit those, not this file (make check-deploy fails when they "
          "differ).\n")
_PATTERN = {"literal": "literal", "prefixed": "prefix"}  # Strimzi's spelling


def user_name(role: Role) -> str:
    return f"vf-{role.name}"


def _metadata(name: str) -> dict[str, Any]:
    return {"name": name, "labels": {"strimzi.io/cluster": CLUSTER,
                                     "app.kubernetes.io/name": "voicefactory"}}


def _acls(role_grants: list[Grant]) -> list[dict[str, Any]]:
    """One entry per resource, its operations together, in the grants' order."""
    merged: dict[tuple[str, str, str], list[str]] = {}
    for g in role_grants:
        merged.setdefault((g.resource, g.name, g.pattern), []).append(g.operation)
    return [{"resource": {"type": resource, "name": name, "patternType": _PATTERN[pattern]},
             "operations": operations, "host": "*"}
            for (resource, name, pattern), operations in merged.items()]


def resources() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for spec in ALL_TOPICS:
        configs = spec.configs(min_insync_replicas=REPLICATION.min_insync)
        out.append({
            "apiVersion": "kafka.strimzi.io/v1beta2", "kind": "KafkaTopic",
            "metadata": _metadata(spec.name),
            "spec": {"topicName": spec.name, "partitions": spec.partitions,
                     "replicas": REPLICATION.factor, "config": configs}})
    for role in KUBERNETES_ROLES:
        out.append({
            "apiVersion": "kafka.strimzi.io/v1beta2", "kind": "KafkaUser",
            "metadata": _metadata(user_name(role)),
            "spec": {"authentication": {"type": "scram-sha-512"},
                     "authorization": {"type": "simple", "acls": _acls(grants(role))}}})
    return out


def render() -> str:
    return HEADER + yaml.safe_dump_all(resources(), sort_keys=False, width=100)


def sync(manifest: Path) -> bool:
    text = render()
    if manifest.exists() and manifest.read_text(encoding="utf-8") == text:
        return False
    manifest.write_text(text, encoding="utf-8")
    return True


def drift(manifest: Path) -> list[str]:
    if not manifest.exists():
        return [f"{manifest} is missing; run `python -m deploy.checks sync-strimzi`"]
    if manifest.read_text(encoding="utf-8") != render():
        return [f"{manifest} differs from what topics/specs.py and topics/acls.py generate; "
                "run `python -m deploy.checks sync-strimzi`"]
    return []
