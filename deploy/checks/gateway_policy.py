"""What a rendered overlay must say about the HTTP gateway (docs/gateway.md).

`kustomize build` output -> `policy.parse()` -> `gateway_policy(docs)` -> problems: the
Deployment probes /healthz and /readyz on its ops port (VF_GATEWAY_OPS_PORT, the container
port named `metrics`), which is not its API port; no Ingress routes the gateway's ops port
or a path under /metrics, /healthz or /readyz (`ingress_problems`: those answer only on the
ops port, and an Ingress must not expose it); the keys file it is told to read lies in a mounted
Secret volume (hashes only, never a ConfigMap); the Service spreads requests (no session
affinity: replicas are stateless); the HPA scales that Deployment with at least two replicas
(a dying pod leaves the other streams on its peer) and at most one per tts.audio partition
(a replica without a reply partition never becomes ready).
"""

from __future__ import annotations

from deploy.checks.policy import Doc, find
from topics.specs import AUDIO

__all__ = ["GATEWAY", "gateway_policy", "ingress_problems"]

GATEWAY = "vf-gateway"
API_PORT, OPS_PORT = 8080, 9110  # VF_GATEWAY_PORT and VF_GATEWAY_OPS_PORT's defaults
OPS_PORT_NAME = "metrics"  # the container and Service port the ServiceMonitor scrapes
OPS_PATHS = ("/metrics", "/healthz", "/readyz")


def gateway_policy(docs: list[Doc]) -> list[str]:
    deployments = find(docs, "Deployment", GATEWAY)
    if len(deployments) != 1:
        return [f"expected one Deployment {GATEWAY}, found {len(deployments)}"]
    pod = deployments[0]["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod.get("containers", [])}
    gateway = containers.get("gateway")
    if gateway is None:
        return [f"Deployment {GATEWAY} has no container named gateway"]
    problems = _ops_port(gateway)
    problems += _keys_from_a_secret(pod, gateway)
    for service in find(docs, "Service", GATEWAY):
        if service["spec"].get("sessionAffinity", "None") != "None":
            problems.append("Service vf-gateway must not pin clients (sessionAffinity None): "
                            "replicas are stateless")
    problems += _hpa(docs)
    problems += ingress_problems(docs, _ops_ports(docs, gateway))
    return problems


def _env(container: Doc) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def _ops_port(gateway: Doc) -> list[str]:
    """The probes GET /healthz and /readyz on the ops port, a port apart from the API's."""
    env = _env(gateway)
    ops = int(env.get("VF_GATEWAY_OPS_PORT") or OPS_PORT)
    api = int(env.get("VF_GATEWAY_PORT") or API_PORT)
    ports = {p.get("name"): p["containerPort"] for p in gateway.get("ports", [])}
    problems = []
    if ops == api:
        problems.append(f"gateway VF_GATEWAY_OPS_PORT equals VF_GATEWAY_PORT ({api})")
    if ports.get(OPS_PORT_NAME) != ops:
        problems.append(f"gateway container port {OPS_PORT_NAME!r} must be the ops port "
                        f"{ops} (the ServiceMonitor scrapes it), is {ports.get(OPS_PORT_NAME)}")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        spec = gateway.get(probe) or {}
        get = spec.get("httpGet") or {}
        if get.get("path") != path:
            problems.append(f"gateway {probe} must GET {path}, has {spec or 'none'}")
        elif get.get("port") not in (OPS_PORT_NAME, ops):
            problems.append(f"gateway {probe} must use the ops port ({OPS_PORT_NAME} / {ops}): "
                            f"the API port answers {path} 404, has {get.get('port')!r}")
    return problems


def _ops_ports(docs: list[Doc], gateway: Doc) -> set[str | int]:
    """Every way a Service port of the gateway can name its ops listener: the Service
    port's name and number, whichever target the ops container port."""
    ops = int(_env(gateway).get("VF_GATEWAY_OPS_PORT") or OPS_PORT)
    found: set[str | int] = {OPS_PORT_NAME, ops}
    for service in find(docs, "Service", GATEWAY):
        for port in service["spec"].get("ports", []):
            if port.get("targetPort") in (OPS_PORT_NAME, ops):
                found |= {p for p in (port.get("name"), port.get("port")) if p is not None}
    return found


def _backends(ingress: Doc) -> list[tuple[str, Doc]]:
    """(path, backend) of every rule of an Ingress; "" for the default backend."""
    spec = ingress.get("spec") or {}
    out = [("", spec["defaultBackend"])] if spec.get("defaultBackend") else []
    for rule in spec.get("rules") or []:
        for path in (rule.get("http") or {}).get("paths") or []:
            out.append((path.get("path") or "/", path.get("backend") or {}))
    return out


def ingress_problems(docs: list[Doc], ops_ports: set[str | int]) -> list[str]:
    """An Ingress that would expose the gateway's ops listener or its paths."""
    problems = []
    for ingress in find(docs, "Ingress"):
        name = ingress["metadata"]["name"]
        for path, backend in _backends(ingress):
            service = backend.get("service") or {}
            port = service.get("port") or {}
            if service.get("name") == GATEWAY and (port.get("name") in ops_ports
                                                   or port.get("number") in ops_ports):
                problems.append(f"Ingress {name} routes {path or 'its default backend'} to the "
                                f"gateway's ops port ({port}): /metrics and the probes must "
                                "not be public")
            if any(path.rstrip("/") == p or path.startswith(p + "/") for p in OPS_PATHS):
                problems.append(f"Ingress {name} routes the path {path}: /metrics, /healthz "
                                "and /readyz must not be public")
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
