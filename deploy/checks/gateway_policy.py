"""What a rendered overlay must say about the HTTP gateway (docs/gateway.md).

`kustomize build` output -> `policy.parse()` -> `gateway_policy(docs)` -> problems: the
Deployment probes /healthz and /readyz; the keys file it is told to read lies in a mounted
Secret volume (hashes only, never a ConfigMap); the Service spreads requests (no session
affinity: replicas are stateless); the HPA scales that Deployment with at least two replicas
(a dying pod leaves the other streams on its peer) and at most one per tts.audio partition
(a replica without a reply partition never becomes ready).
"""

from __future__ import annotations

from deploy.checks.policy import Doc, find
from topics.specs import AUDIO

__all__ = ["GATEWAY", "gateway_policy"]

GATEWAY = "vf-gateway"


def gateway_policy(docs: list[Doc]) -> list[str]:
    deployments = find(docs, "Deployment", GATEWAY)
    if len(deployments) != 1:
        return [f"expected one Deployment {GATEWAY}, found {len(deployments)}"]
    pod = deployments[0]["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod.get("containers", [])}
    gateway = containers.get("gateway")
    if gateway is None:
        return [f"Deployment {GATEWAY} has no container named gateway"]
    problems = []
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        spec = gateway.get(probe) or {}
        if (spec.get("httpGet") or {}).get("path") != path:
            problems.append(f"gateway {probe} must GET {path}, has {spec or 'none'}")
    problems += _keys_from_a_secret(pod, gateway)
    for service in find(docs, "Service", GATEWAY):
        if service["spec"].get("sessionAffinity", "None") != "None":
            problems.append("Service vf-gateway must not pin clients (sessionAffinity None): "
                            "replicas are stateless")
    problems += _hpa(docs)
    return problems


def _keys_from_a_secret(pod: Doc, gateway: Doc) -> list[str]:
    env = {e["name"]: e.get("value") for e in gateway.get("env", [])}
    keys_file = env.get("VF_GATEWAY_KEYS_FILE")
    if not keys_file:
        return ["gateway sets no VF_GATEWAY_KEYS_FILE (the default is the pod's state dir)"]
    secrets = {v["name"] for v in pod.get("volumes", []) if "secret" in v}
    mounted = [m for m in gateway.get("volumeMounts", [])
               if m["name"] in secrets and keys_file.startswith(m["mountPath"].rstrip("/") + "/")]
    if not mounted:
        return [f"VF_GATEWAY_KEYS_FILE {keys_file} is not inside a mounted Secret volume"]
    if any(m.get("subPath") for m in mounted):
        return ["the keys Secret is mounted with subPath, which never sees updates"]
    return []


def _hpa(docs: list[Doc]) -> list[str]:
    hpas = [h for h in find(docs, "HorizontalPodAutoscaler")
            if h["spec"]["scaleTargetRef"].get("name") == GATEWAY]
    if len(hpas) != 1:
        return [f"expected one HorizontalPodAutoscaler for {GATEWAY}, found {len(hpas)}"]
    spec = hpas[0]["spec"]
    problems = []
    if spec["scaleTargetRef"].get("kind") != "Deployment":
        problems.append("the gateway HPA must scale the Deployment")
    if spec.get("minReplicas", 1) < 2:
        problems.append(f"gateway minReplicas {spec.get('minReplicas', 1)}: want >= 2")
    if spec["maxReplicas"] > AUDIO.partitions:
        problems.append(f"gateway maxReplicas {spec['maxReplicas']} exceeds the "
                        f"{AUDIO.partitions} partitions of tts.audio")
    return problems
