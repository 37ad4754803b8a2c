"""What a rendered overlay must say about the worker, beyond what the schemas check.

Data flow: `kustomize build` output -> `parse()` -> documents -> `worker_policy(docs,
gpu=...)` -> a list of problems, empty when the overlay is fit to apply. The schema
validation (kubeconform) proves each object is well-formed; this proves the objects agree
with each other and with the code: the ScaledObject watches the topic and group the
ConfigMap gives the worker, the grace period outlasts the configured drain, the PDB selects
the worker pods, no secret value sits in git.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from topics.specs import REQUESTS, REQUESTS_SHARDS

__all__ = ["Doc", "find", "parse", "worker_policy"]

Doc = dict[str, Any]

WORKER = "vf-worker"
GPU = "nvidia.com/gpu"
# vf-prestop waits up to VF_DRAIN_SECONDS + this for the worker to exit (deploy/docker).
PRESTOP_MARGIN_S = 15
_SECRET_NAME = re.compile(r"(SECRET|PASSWORD|ACCESS_KEY|TOKEN)", re.IGNORECASE)


def parse(rendered: str) -> list[Doc]:
    return [d for d in yaml.safe_load_all(rendered) if d]


def find(docs: list[Doc], kind: str, name: str | None = None) -> list[Doc]:
    return [d for d in docs if d.get("kind") == kind
            and (name is None or d.get("metadata", {}).get("name") == name)]


def worker_policy(docs: list[Doc], *, gpu: bool = True) -> list[str]:
    problems: list[str] = []
    sets = find(docs, "StatefulSet", WORKER)
    if len(sets) != 1:
        return [f"expected one StatefulSet {WORKER}, found {len(sets)}"]
    sts = sets[0]
    pod = sts["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod.get("containers", [])}
    worker = containers.get("worker")
    if worker is None:
        return [f"StatefulSet {WORKER} has no container named worker"]
    config = _config(docs, worker)
    problems += _probes(worker)
    problems += _gpu(pod, worker) if gpu else _no_gpu(pod, worker)
    problems += _termination(pod, worker, config)
    problems += _instance_id(worker)
    problems += _pdb(docs, sts)
    problems += _scaled_object(docs, config)
    problems += _no_secret_values(docs)
    return problems


def _config(docs: list[Doc], container: Doc) -> dict[str, str]:
    """The VF_* settings the container gets from its ConfigMaps (envFrom)."""
    out: dict[str, str] = {}
    for source in container.get("envFrom", []):
        ref = source.get("configMapRef")
        if ref:
            for cm in find(docs, "ConfigMap", ref["name"]):
                out.update({k: str(v) for k, v in (cm.get("data") or {}).items()})
    return out


def _probes(worker: Doc) -> list[str]:
    problems = []
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"),
                        ("startupProbe", "/healthz")):
        spec = worker.get(probe)
        if not spec:
            problems.append(f"worker has no {probe}")
        elif (spec.get("httpGet") or {}).get("path") != path:
            problems.append(f"worker {probe} must GET {path}, has {spec}")
    startup = worker.get("startupProbe") or {}
    budget = startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3)
    if startup and budget < 300:
        problems.append(f"startupProbe allows {budget} s for model loading; want >= 300 s")
    return problems


def _gpu(pod: Doc, worker: Doc) -> list[str]:
    problems = []
    limits = (worker.get("resources") or {}).get("limits") or {}
    if str(limits.get(GPU)) != "1":
        problems.append(f"worker limits must have {GPU}: 1 (one process per GPU), has "
                        f"{limits.get(GPU)!r}")
    if not pod.get("nodeSelector"):
        problems.append("worker pod has no nodeSelector for GPU nodes")
    if not any(t.get("key") == GPU for t in pod.get("tolerations") or []):
        problems.append(f"worker pod has no toleration for the {GPU} taint")
    return problems


def _no_gpu(pod: Doc, worker: Doc) -> list[str]:
    resources = worker.get("resources") or {}
    if any(GPU in (resources.get(k) or {}) for k in ("limits", "requests")):
        return [f"this overlay runs on CPU but the worker still asks for {GPU}"]
    return []


def _termination(pod: Doc, worker: Doc, config: dict[str, str]) -> list[str]:
    problems = []
    if not ((worker.get("lifecycle") or {}).get("preStop") or {}):
        problems.append("worker has no preStop hook")
    drain = int(config.get("VF_DRAIN_SECONDS", "30"))
    grace = pod.get("terminationGracePeriodSeconds", 30)
    if grace <= drain + PRESTOP_MARGIN_S:
        problems.append(f"terminationGracePeriodSeconds {grace} must exceed VF_DRAIN_SECONDS "
                        f"{drain} + {PRESTOP_MARGIN_S} s (the preStop wait), or the kubelet "
                        "kills the worker mid-drain")
    return problems


def _instance_id(worker: Doc) -> list[str]:
    env = {e["name"]: e for e in worker.get("env", [])}
    ref = ((env.get("VF_INSTANCE_ID") or {}).get("valueFrom") or {}).get("fieldRef") or {}
    if ref.get("fieldPath") != "metadata.name":
        return ["VF_INSTANCE_ID must come from the pod name (static membership)"]
    return []


def _pdb(docs: list[Doc], sts: Doc) -> list[str]:
    labels = sts["spec"]["template"]["metadata"].get("labels", {})
    for pdb in find(docs, "PodDisruptionBudget"):
        selector = (pdb["spec"].get("selector") or {}).get("matchLabels") or {}
        if selector and all(labels.get(k) == v for k, v in selector.items()):
            return []
    return [f"no PodDisruptionBudget selects the {WORKER} pods {labels}"]


def _scaled_object(docs: list[Doc], config: dict[str, str]) -> list[str]:
    objects = [so for so in find(docs, "ScaledObject")
               if so["spec"].get("scaleTargetRef", {}).get("name") == WORKER]
    if len(objects) != 1:
        return [f"expected one ScaledObject targeting {WORKER}, found {len(objects)}"]
    spec = objects[0]["spec"]
    problems = []
    if spec["scaleTargetRef"].get("kind") != "StatefulSet":
        problems.append("ScaledObject must target the StatefulSet")
    if spec.get("maxReplicaCount", 100) > REQUESTS_SHARDS.partitions:
        problems.append(f"maxReplicaCount {spec.get('maxReplicaCount')} exceeds the "
                        f"{REQUESTS_SHARDS.partitions} partitions of {REQUESTS_SHARDS.name}")
    prefix = config.get("VF_TOPIC_PREFIX", "")
    kafka = {t.get("metadata", {}).get("topic"): t.get("metadata", {})
             for t in spec.get("triggers", []) if t.get("type") == "kafka"}
    # The batch lane's two topics: plain-keyed producers' and the routers' (the shard lane).
    topics = [prefix + REQUESTS.name, prefix + REQUESTS_SHARDS.name]
    if sorted(kafka, key=str) != sorted(topics):
        problems.append(f"expected kafka triggers on {' and '.join(topics)}, found "
                        f"{', '.join(map(repr, kafka)) or 'none'}")
    want = {
        # Unset, the worker's group carries the topic prefix (consumers.settings).
        "consumerGroup": config.get("VF_GROUP_ID", prefix + "vf-synth"),
        "bootstrapServers": config.get("VF_KAFKA_BOOTSTRAP", ""),
    }
    for topic, meta in kafka.items():
        for key, value in want.items():
            if meta.get(key) != value:
                problems.append(f"ScaledObject kafka trigger on {topic}: {key} is "
                                f"{meta.get(key)!r}, the worker uses {value!r}")
        threshold = str(meta.get("lagThreshold", ""))
        if not threshold.isdigit() or int(threshold) <= 0:
            problems.append(f"lagThreshold {threshold!r} must be a positive integer")
    return problems


def _no_secret_values(docs: list[Doc]) -> list[str]:
    problems = []
    for doc in docs:
        kind, name = doc.get("kind"), doc.get("metadata", {}).get("name")
        if kind == "Secret" and (doc.get("data") or doc.get("stringData")):
            problems.append(f"Secret {name} carries values; secrets are created outside git")
        if kind == "ConfigMap":
            problems += [f"ConfigMap {name} holds {k}, which belongs in the Secret"
                         for k in doc.get("data") or {} if _SECRET_NAME.search(k)]
        for container in _containers(doc):
            problems += [f"{kind} {name}: env {e['name']} has a literal value; use a "
                         "secretKeyRef" for e in container.get("env", [])
                         if _SECRET_NAME.search(e["name"]) and "value" in e]
    return problems


def _containers(doc: Doc) -> list[Doc]:
    spec = doc.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or {}
    return [*pod.get("containers", []), *pod.get("initContainers", [])]
