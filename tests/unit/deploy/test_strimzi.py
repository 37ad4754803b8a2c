"""The prod overlay's Strimzi resources are the contract's topics and roles, and the role's
pods log in as their own KafkaUser over SASL_SSL with the cluster CA."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml

from deploy.checks import runner, strimzi
from tests.unit.deploy.conftest import edit
from topics.acls import KUBERNETES_ROLES, grants
from topics.specs import ALL_TOPICS

ROOT = Path(__file__).resolve().parents[3]


def _docs(kind: str) -> dict[str, dict[str, object]]:
    return {d["metadata"]["name"]: d for d in strimzi.resources() if d["kind"] == kind}


def test_every_topic_is_declared_with_three_replicas_and_two_in_sync() -> None:
    topics = _docs("KafkaTopic")
    assert set(topics) == {s.name for s in ALL_TOPICS}
    for spec in ALL_TOPICS:
        body = topics[spec.name]["spec"]
        assert body == {"topicName": spec.name, "partitions": spec.partitions, "replicas": 3,
                        "config": {**spec.configs(), "min.insync.replicas": "2"}}


def test_each_role_is_a_scram_user_whose_acls_are_exactly_its_grants() -> None:
    users = _docs("KafkaUser")
    assert set(users) == {f"vf-{r.name}" for r in KUBERNETES_ROLES}
    for role in KUBERNETES_ROLES:
        spec = users[f"vf-{role.name}"]["spec"]
        assert spec["authentication"] == {"type": "scram-sha-512"}  # type: ignore[index]
        declared = {(a["resource"]["type"], a["resource"]["name"], op)
                    for a in spec["authorization"]["acls"]  # type: ignore[index]
                    for op in a["operations"]}
        assert declared == {(g.resource, g.name, g.operation) for g in grants(role)}
    keda = users["vf-keda"]["spec"]["authorization"]["acls"]  # type: ignore[index]
    assert {op for a in keda for op in a["operations"]} == {"Describe"}  # reads lag, no data


def test_the_committed_manifest_is_generated_and_a_stale_one_fails(
        checkout: Callable[[], runner.Layout]) -> None:
    assert strimzi.drift(runner.Layout(root=ROOT).strimzi) == []
    layout = checkout()
    edit(layout.strimzi, "  replicas: 3\n  config:\n    cleanup.policy: compact\n",
         "  replicas: 1\n  config:\n    cleanup.policy: compact\n")
    [outcome] = runner.run_all(layout, ["strimzi-sync"])
    assert outcome.problems and "sync-strimzi" in outcome.problems[0]


def test_a_field_strimzi_does_not_have_fails_kubeconform(
        checkout: Callable[[], runner.Layout]) -> None:
    layout = checkout()
    edit(layout.strimzi, "  topicName: tts.dlq\n", "  topicName: tts.dlq\n  retention: 30d\n")
    [outcome] = runner.run_all(layout, ["kubeconform"])
    assert any("KafkaTopic tts.dlq is invalid" in p and "'retention' not allowed" in p
               for p in outcome.problems), outcome.problems


def test_the_schemas_are_strimzis_own_not_a_subset(
        checkout: Callable[[], runner.Layout]) -> None:
    """Strimzi's KafkaUser has quotas, which this project does not use (a subset written
    here would reject them); its ACL operations are an enum, so a misspelt one fails."""
    layout = checkout()
    edit(layout.strimzi, "  name: vf-worker\n  labels:\n    strimzi.io/cluster: vf\n"
         "    app.kubernetes.io/name: voicefactory\nspec:\n",
         "  name: vf-worker\n  labels:\n    strimzi.io/cluster: vf\n"
         "    app.kubernetes.io/name: voicefactory\nspec:\n"
         "  quotas:\n    producerByteRate: 1048576\n")
    [outcome] = runner.run_all(layout, ["kubeconform"])
    assert outcome.problems == [], outcome.problems
    edit(layout.strimzi, "  quotas:\n    producerByteRate: 1048576\n",
         "  quotas:\n    producerByteRate: lots\n")
    layout.rendered.clear()  # rendered again from the edited file
    [outcome] = runner.run_all(layout, ["kubeconform"])
    assert any("KafkaUser vf-worker is invalid" in p and "producerByteRate" in p
               for p in outcome.problems), outcome.problems


def test_every_kafka_client_pod_logs_in_as_its_own_user_with_the_ca(
        rendered: dict[str, str]) -> None:
    expected = {"vf-worker": "vf-worker", "vf-gateway": "vf-gateway",
                "vf-aggregator": "vf-aggregator", "vf-topics": "vf-topics"}
    seen = {}
    for doc in yaml.safe_load_all(rendered["overlays/prod"]):
        if not doc or doc["kind"] not in ("StatefulSet", "Deployment", "Job"):
            continue
        pod = doc["spec"]["template"]["spec"]
        env = {e["name"]: e for c in pod["containers"] for e in c.get("env", [])}
        user = env["VF_KAFKA_SASL_USERNAME"]["value"]
        assert env["VF_KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
            "name": user, "key": "password"}
        assert any(v.get("secret", {}).get("secretName") == "vf-kafka-ca"
                   for v in pod["volumes"])
        seen[doc["metadata"]["name"]] = user
    assert seen == expected
    assert "VF_KAFKA_SSL_CAFILE=/etc/voicefactory/kafka-ca/ca.crt" in rendered["overlays/prod"] \
        or "VF_KAFKA_SSL_CAFILE: /etc/voicefactory/kafka-ca/ca.crt" in rendered["overlays/prod"]
