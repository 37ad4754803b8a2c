"""The rendered Kubernetes manifests: what the worker pod, its PDB and its ScaledObject say,
checked on `kustomize build` output (real kustomize), and the schema validation (real
kubeconform, Kubernetes + KEDA + Prometheus-operator schemas) shown to reject broken
copies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from deploy.checks import policy, runner
from tests.unit.deploy.conftest import ROOT, edit
from topics.specs import REQUESTS_SHARDS

pytestmark = pytest.mark.timeout(1800)  # a cold tool cache builds Go tools first

GPU_OVERLAYS = ("base", "overlays/prod")


def _worker(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    [sts] = policy.find(docs, "StatefulSet", "vf-worker")
    pod = sts["spec"]["template"]["spec"]
    [container] = [c for c in pod["containers"] if c["name"] == "worker"]
    return pod, container


def _config(docs: list[dict[str, Any]]) -> dict[str, str]:
    [cm] = [d for d in policy.find(docs, "ConfigMap")
            if d["metadata"]["name"].startswith("vf-config")]
    return dict(cm["data"])


@pytest.mark.parametrize("overlay", GPU_OVERLAYS)
def test_worker_pod_has_probes_gpu_and_drain(rendered: dict[str, str], overlay: str) -> None:
    docs = policy.parse(rendered[overlay])
    pod, worker = _worker(docs)
    assert worker["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert worker["readinessProbe"]["httpGet"]["path"] == "/readyz"
    startup = worker["startupProbe"]
    assert startup["httpGet"]["path"] == "/healthz"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300  # model loading
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"]
    assert worker["lifecycle"]["preStop"]["exec"]["command"] == ["/usr/local/bin/vf-prestop"]
    drain = int(_config(docs)["VF_DRAIN_SECONDS"])
    # vf-prestop waits up to drain + 15 s; the grace period must outlast it.
    assert pod["terminationGracePeriodSeconds"] > drain + 15
    env = {e["name"]: e for e in worker["env"]}
    assert env["VF_INSTANCE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_prod_drains_longer_and_grace_follows(rendered: dict[str, str]) -> None:
    docs = policy.parse(rendered["overlays/prod"])
    pod, _ = _worker(docs)
    assert _config(docs)["VF_DRAIN_SECONDS"] == "60"
    assert pod["terminationGracePeriodSeconds"] == 90


@pytest.mark.parametrize("overlay", runner.OVERLAYS)
def test_pdb_selects_the_worker_pods(rendered: dict[str, str], overlay: str) -> None:
    docs = policy.parse(rendered[overlay])
    [sts] = policy.find(docs, "StatefulSet", "vf-worker")
    [pdb] = policy.find(docs, "PodDisruptionBudget", "vf-worker")
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


@pytest.mark.parametrize("overlay", runner.OVERLAYS)
def test_scaled_object_watches_the_workers_topic_and_group(rendered: dict[str, str],
                                                           overlay: str) -> None:
    docs = policy.parse(rendered[overlay])
    config = _config(docs)
    [so] = policy.find(docs, "ScaledObject", "vf-worker")
    spec = so["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "StatefulSet",
                                      "name": "vf-worker"}
    plain, shards = spec["triggers"]
    assert plain["type"] == shards["type"] == "kafka"
    assert plain["metadata"]["topic"] == config["VF_TOPIC_PREFIX"] + "tts.requests"
    assert shards["metadata"]["topic"] == config["VF_TOPIC_PREFIX"] + "tts.requests.shards"
    for meta in (plain["metadata"], shards["metadata"]):
        assert meta["consumerGroup"] == config["VF_GROUP_ID"] == "vf-synth"
        assert meta["bootstrapServers"] == config["VF_KAFKA_BOOTSTRAP"]
        assert int(meta["lagThreshold"]) > 0
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"] <= REQUESTS_SHARDS.partitions


def test_lag_threshold_is_one_gpus_minute_of_work(rendered: dict[str, str]) -> None:
    # 1.5 requests/s per GPU x 60 s of backlog (worker-scaledobject.yaml, operations.md).
    [so] = policy.find(policy.parse(rendered["overlays/prod"]), "ScaledObject")
    assert [t["metadata"]["lagThreshold"] for t in so["spec"]["triggers"]] == \
        [str(int(1.5 * 60))] * 2
    assert so["spec"]["maxReplicaCount"] == REQUESTS_SHARDS.partitions


def test_dev_runs_on_cpu_with_its_own_kafka_and_s3(rendered: dict[str, str]) -> None:
    docs = policy.parse(rendered["overlays/dev"])
    pod, worker = _worker(docs)
    assert "nvidia.com/gpu" not in worker["resources"].get("limits", {})
    assert "nodeSelector" not in pod and "tolerations" not in pod
    assert worker["image"] == "voicefactory-cpu:dev"
    assert _config(docs)["VF_ENGINE"] == "espeak"
    assert policy.find(docs, "StatefulSet", "kafka") and policy.find(docs, "Deployment", "s3")
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"} == {
        "vf-dev"}


@pytest.mark.parametrize("overlay", runner.OVERLAYS)
def test_no_secret_values_in_git(rendered: dict[str, str], overlay: str) -> None:
    docs = policy.parse(rendered[overlay])
    assert policy.find(docs, "Secret") == []
    _, worker = _worker(docs)
    assert {"secretRef": {"name": "vf-secrets"}} in worker["envFrom"]
    assert not any(k.endswith(("SECRET_KEY", "ACCESS_KEY", "PASSWORD")) for k in _config(docs))


def test_every_overlay_passes_policy_and_schemas(rendered: dict[str, str]) -> None:
    layout = runner.Layout(root=ROOT, rendered=dict(rendered))
    assert runner.check_policy(layout) == []
    assert runner.check_kubeconform(layout) == []


# -- broken copies must fail --------------------------------------------------------------

def test_kustomize_fails_on_a_missing_resource(checkout: Callable[[], runner.Layout]) -> None:
    layout = checkout()
    (layout.k8s / "base" / "worker-pdb.yaml").unlink()
    problems = runner.check_kustomize(layout)
    assert any("kustomize build base failed" in p and "worker-pdb.yaml" in p for p in problems)


def test_kubeconform_rejects_a_misspelt_pod_field(checkout: Callable[[], runner.Layout]) -> None:
    layout = checkout()
    edit(layout.k8s / "base" / "worker-statefulset.yaml",
         "terminationGracePeriodSeconds: 60", "terminationGracePeriodSecond: 60")
    problems = runner.check_kubeconform(layout)
    assert problems and all("terminationGracePeriodSecond" in p for p in problems)


def test_kubeconform_rejects_a_bad_scaled_object(checkout: Callable[[], runner.Layout]) -> None:
    layout = checkout()
    edit(layout.k8s / "base" / "worker-scaledobject.yaml", "maxReplicaCount: 48",
         "maxReplicaCount: twelve")
    problems = runner.check_kubeconform(layout)
    assert problems and all("ScaledObject vf-worker is invalid" in p for p in problems)


def test_kubeconform_rejects_a_bad_service_monitor(
        checkout: Callable[[], runner.Layout]) -> None:
    layout = checkout()
    edit(layout.k8s / "base" / "servicemonitor.yaml", "scrapeTimeout: 10s",
         "scrapeTimeoutSeconds: 10")
    problems = runner.check_kubeconform(layout)
    assert problems and all("ServiceMonitor voicefactory is invalid" in p for p in problems)


def test_kubeconform_fails_on_a_kind_without_schema(
        checkout: Callable[[], runner.Layout]) -> None:
    layout = checkout()
    extra = layout.k8s / "base" / "mystery.yaml"
    extra.write_text("apiVersion: example.com/v1\nkind: Mystery\nmetadata:\n  name: m\n")
    edit(layout.k8s / "base" / "kustomization.yaml", "  - servicemonitor.yaml\n",
         "  - servicemonitor.yaml\n  - mystery.yaml\n")
    problems = runner.check_kubeconform(layout)
    assert problems and all("could not find schema for Mystery" in p for p in problems)


@pytest.mark.parametrize(("path", "old", "new", "expected"), [
    ("base/worker-statefulset.yaml", "path: /readyz", "path: /healthz",
     "readinessProbe must GET /readyz"),
    ("base/worker-statefulset.yaml", "memory: 24Gi\n              nvidia.com/gpu: 1\n",
     "memory: 24Gi\n", "worker limits must have nvidia.com/gpu: 1"),
    ("base/worker-scaledobject.yaml", "maxReplicaCount: 48", "maxReplicaCount: 64",
     "maxReplicaCount 64 exceeds the 48 partitions of tts.requests.shards"),
    ("base/worker-scaledobject.yaml", "consumerGroup: vf-synth\n        topic: tts.requests\n",
     "consumerGroup: vf-other\n        topic: tts.requests\n",
     "consumerGroup is 'vf-other', the worker uses 'vf-synth'"),
    # Without VF_GROUP_ID the worker's group carries the topic prefix; KEDA must watch it.
    ("base/kustomization.yaml", "      - VF_TOPIC_PREFIX=\n      - VF_GROUP_ID=vf-synth\n",
     "      - VF_TOPIC_PREFIX=acme.\n",
     "consumerGroup is 'vf-synth', the worker uses 'acme.vf-synth'"),
    ("base/worker-scaledobject.yaml", "topic: tts.requests\n", "topic: tts.results\n",
     "expected kafka triggers on tts.requests and tts.requests.shards, found 'tts.results', "
     "'tts.requests.shards'"),
    ("base/worker-statefulset.yaml", "terminationGracePeriodSeconds: 60",
     "terminationGracePeriodSeconds: 30", "must exceed VF_DRAIN_SECONDS"),
    ("base/worker-pdb.yaml", "    matchLabels:\n      app.kubernetes.io/name: voicefactory\n"
     "      app.kubernetes.io/component: worker\n", "    matchLabels:\n"
     "      app.kubernetes.io/name: voicefactory\n      app.kubernetes.io/component: aggr\n",
     "no PodDisruptionBudget selects"),
    ("base/kustomization.yaml", "      - VF_S3_REGION=us-east-1",
     "      - VF_S3_REGION=us-east-1\n      - VF_S3_SECRET_KEY=hunter2",
     "holds VF_S3_SECRET_KEY, which belongs in the Secret"),
    ("base/gateway-hpa.yaml", "maxReplicas: 12", "maxReplicas: 20",
     "gateway maxReplicas 20 exceeds the 12 partitions of tts.audio"),
    ("base/gateway-hpa.yaml", "minReplicas: 2", "minReplicas: 1", "gateway minReplicas 1"),
    ("base/gateway-deployment.yaml", "path: /readyz", "path: /healthz",
     "gateway readinessProbe must GET /readyz"),
    ("base/gateway-deployment.yaml", "value: /etc/voicefactory/gateway-keys/keys",
     "value: /var/lib/voicefactory/keys", "is not inside a mounted Secret volume"),
    ("base/gateway-service.yaml", "sessionAffinity: None", "sessionAffinity: ClientIP",
     "must not pin clients"),
    # The probes on the API port: it answers them 404 since the ops port split.
    ("base/gateway-deployment.yaml", "              path: /readyz\n              port: metrics",
     "              path: /readyz\n              port: http",
     "gateway readinessProbe must use the ops port"),
    ("base/gateway-deployment.yaml", "value: \"9110\"", "value: \"8080\"",
     "VF_GATEWAY_OPS_PORT equals VF_GATEWAY_PORT"),
    # An Ingress that would make /metrics public, by port (name or number) or by path.
    ("overlays/prod/ingress.yaml", "path: /console\n            pathType: Prefix\n"
     "            backend:\n              service:\n                name: vf-gateway\n"
     "                port:\n                  name: http",
     "path: /console\n            pathType: Prefix\n"
     "            backend:\n              service:\n                name: vf-gateway\n"
     "                port:\n                  name: metrics",
     "Ingress vf-gateway routes /console to the gateway's ops port"),
    ("overlays/prod/ingress.yaml", "port:\n                  name: http\n          - path: "
     "/openapi.json", "port:\n                  number: 9110\n          - path: /openapi.json",
     "Ingress vf-gateway routes /v1 to the gateway's ops port"),
    ("overlays/prod/ingress.yaml", "path: /openapi.json", "path: /metrics",
     "Ingress vf-gateway routes the path /metrics"),
])
def test_policy_catches_a_broken_copy(checkout: Callable[[], runner.Layout], path: str,
                                      old: str, new: str, expected: str) -> None:
    layout = checkout()
    edit(layout.k8s / path, old, new)
    runner.check_kustomize(layout)
    problems = runner.check_policy(layout)
    assert any(expected in p for p in problems), problems
