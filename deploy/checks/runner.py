"""Every check of `deploy/`, each one a function of a `Layout` that returns its problems.

Data flow: `run_all(layout)` runs the checks in CHECKS order and collects `Outcome`s:

    kustomize      kustomize build of base, dev, prod           -> rendered YAML (kept)
    kubeconform    rendered YAML x Kubernetes versions, strict, with the KEDA,
                   Prometheus-operator and Strimzi (KafkaTopic, KafkaUser) CRD schemas that
                   deploy.tools.install converts from each project's released CRDs; a kind
                   without a schema fails
    policy         rendered YAML -> deploy.checks.policy (probes, GPU, drain, PDB, KEDA)
                   and deploy.checks.gateway_policy (probes, keys Secret, HPA bounds)
    promtool       `promtool check rules` on alerts.yml and on the PrometheusRule's rules,
                   `promtool check config` on the compose Prometheus config
    rule-sync      the PrometheusRule manifest is what alerts.yml generates
    strimzi-sync   the prod overlay's KafkaTopics and KafkaUsers are what topics/specs.py
                   and topics/acls.py generate (deploy.checks.strimzi)
    dashboard      deploy.checks.dashboard lint + every expression parsed by promtool
    metrics        every metric a dashboard or rule queries is one the code exports
    dockerfiles    hadolint on each Dockerfile, shellcheck on the entrypoint scripts
    compose        compose-go's loader, as `docker compose config` runs it (composecheck)
    examples       every event example in README.md and docs/ (markdown blocks, AsyncAPI
                   message examples) against topics/schemas/ with ajv, strict draft 2020-12,
                   as a Node.js consumer validates (deploy/tools/examplecheck/check.mjs)

Tools come from deploy.tools.install (the cache); a missing tool is a failed check naming
the install command, never a skip. A `Layout` points at a checkout (or a broken copy of one
in a test), so every check can be proven to fail.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from deploy.checks import dashboard, exported, gateway_policy, policy, promql, rules, strimzi
from deploy.tools import install

__all__ = ["CHECKS", "Layout", "Outcome", "run_all"]

# kubeconform's path templates: Kubernetes kinds as kubernetes-validate names them
# (service-v1.json, deployment-apps-v1.json), CRDs as deploy.tools.crdschema writes them.
_K8S_TEMPLATE = "{{ .ResourceKind }}{{ .KindSuffix }}.json"
_CRD_TEMPLATE = "{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"

# Overlays and whether their worker runs on a GPU (dev runs espeak on CPU).
OVERLAYS = {"base": True, "overlays/dev": False, "overlays/prod": True}


@dataclass
class Layout:
    root: Path
    rendered: dict[str, str] = field(default_factory=dict)  # filled by the kustomize check

    @property
    def deploy(self) -> Path:
        return self.root / "deploy"

    @property
    def k8s(self) -> Path:
        return self.deploy / "k8s"

    @property
    def rules_file(self) -> Path:
        return self.deploy / "prometheus" / "alerts.yml"

    @property
    def prometheus_rule(self) -> Path:
        return self.k8s / "base" / "prometheusrule.yaml"

    @property
    def strimzi(self) -> Path:
        return self.k8s / "overlays" / "prod" / "strimzi.yaml"

    @property
    def dashboard(self) -> Path:
        return self.deploy / "grafana" / "voicefactory.json"

    @property
    def compose(self) -> Path:
        return self.deploy / "compose" / "compose.yaml"

    @property
    def compose_prometheus(self) -> Path:
        return self.deploy / "compose" / "prometheus" / "prometheus.yml"

    @property
    def dockerfiles(self) -> list[Path]:
        return sorted(p for p in (self.deploy / "docker").glob("Dockerfile.*")
                      if p.suffix != ".dockerignore")


@dataclass(frozen=True)
class Outcome:
    name: str
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


class CheckError(RuntimeError):
    """A check that could not run at all: a tool not installed, an overlay that won't render."""


def tool(binary: Path) -> str:
    if not binary.exists():
        raise CheckError(f"{binary} is not installed: run `python -m deploy.tools.install`")
    return str(binary)


def _run(cmd: list[str], *, cwd: Path | None = None) -> tuple[int, str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, check=False,
                          timeout=300)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


# -- the checks -----------------------------------------------------------------------------

def check_kustomize(layout: Layout) -> list[str]:
    problems = []
    for overlay in OVERLAYS:
        code, out = _run([tool(install.KUSTOMIZE.binary), "build", str(layout.k8s / overlay)])
        if code != 0:
            problems.append(f"kustomize build {overlay} failed: {out}")
        else:
            layout.rendered[overlay] = out
    return problems


def check_kubeconform(layout: Layout) -> list[str]:
    problems = []
    crds = install.crd_schema_dir()
    for overlay, text in _rendered(layout).items():
        for version in install.KUBERNETES_VERSIONS:
            k8s = install.kubernetes_schema_dir(version)
            # No -ignore-missing-schemas: a kind without a schema is an error, not a pass.
            cmd = [tool(install.KUBECONFORM.binary), "-strict", "-summary", "-output", "text",
                   "-schema-location", f"{k8s}/{_K8S_TEMPLATE}",
                   "-schema-location", f"{crds}/{_CRD_TEMPLATE}", "-"]
            proc = subprocess.run(cmd, input=text, capture_output=True, text=True, check=False,
                                  timeout=300)
            if proc.returncode != 0:
                problems.append(f"kubeconform ({overlay}, Kubernetes {version}):\n"
                                f"{(proc.stdout + proc.stderr).strip()}")
    return problems


def check_policy(layout: Layout) -> list[str]:
    problems = []
    for overlay, text in _rendered(layout).items():
        docs = policy.parse(text)
        problems += [f"{overlay}: {p}"
                     for p in policy.worker_policy(docs, gpu=OVERLAYS[overlay])]
        problems += [f"{overlay}: {p}" for p in gateway_policy.gateway_policy(docs)]
    return problems


def check_promtool(layout: Layout) -> list[str]:
    promtool = tool(install.PROMTOOL.binary)
    problems = []
    code, out = _run([promtool, "check", "rules", str(layout.rules_file)])
    if code != 0:
        problems.append(f"promtool check rules {layout.rules_file.name}: {out}")
    # The operator's copy, as rendered: what the cluster would load.
    for overlay, text in _rendered(layout).items():
        for doc in policy.find(policy.parse(text), "PrometheusRule"):
            with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
                yaml.safe_dump({"groups": doc["spec"]["groups"]}, f)
                f.flush()
                code, out = _run([promtool, "check", "rules", f.name])
            if code != 0:
                problems.append(f"promtool check rules (PrometheusRule in {overlay}): {out}")
    if layout.compose_prometheus.exists():
        code, out = _run([promtool, "check", "config", "--syntax-only",
                          str(layout.compose_prometheus)])
        if code != 0:
            problems.append(f"promtool check config {layout.compose_prometheus}: {out}")
    return problems


def check_rule_sync(layout: Layout) -> list[str]:
    return rules.drift(layout.rules_file, layout.prometheus_rule)


def check_strimzi_sync(layout: Layout) -> list[str]:
    return strimzi.drift(layout.strimzi)


def check_dashboard(layout: Layout) -> list[str]:
    problems = dashboard.lint(layout.dashboard)
    if problems:
        return problems
    # promtool parses PromQL when it checks rules: each expression becomes a recording rule.
    found = dashboard.queries(layout.dashboard)
    exprs = [q for q in found if not q.template]
    group = {"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": promql.grafana_to_promql(q.expr)}
        for i, q in enumerate(exprs)]}
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
        yaml.safe_dump({"groups": [group]}, f)
        f.flush()
        code, out = _run([tool(install.PROMTOOL.binary), "check", "rules", f.name])
    if code != 0:
        # promtool names the failing rule by index: map it back to the panel.
        where = {f"dashboard:query_{i}": q.where for i, q in enumerate(exprs)}
        for record, place in where.items():
            out = out.replace(record, f"{record} [{place}]")
        problems.append(f"dashboard PromQL does not parse: {out}")
    return problems


def check_metrics(layout: Layout) -> list[str]:
    allowed = exported.allowed_names(layout.root)
    problems = []
    for q in dashboard.queries(layout.dashboard):
        names = promql.template_query_metrics(q.expr) if q.template else promql.metric_names(
            q.expr)
        problems += [f"dashboard {q.where} queries {n}, which the code does not export"
                     for n in sorted(names - allowed.keys())]
    groups = (yaml.safe_load(layout.rules_file.read_text(encoding="utf-8")) or {}).get(
        "groups") or []
    for group in groups:
        for rule in group.get("rules") or []:
            label = rule.get("alert") or rule.get("record")
            problems += [f"rule {label} queries {n}, which the code does not export"
                         for n in sorted(promql.metric_names(str(rule.get("expr", "")))
                                         - allowed.keys())]
    return problems


def check_dockerfiles(layout: Layout) -> list[str]:
    files = layout.dockerfiles
    if not files:
        return [f"no Dockerfiles in {layout.deploy / 'docker'}"]
    problems = []
    code, out = _run([tool(install.HADOLINT.binary), "--failure-threshold", "warning",
                      *map(str, files)])
    if code != 0:
        problems.append(f"hadolint: {out}")
    # The entrypoint and the preStop hook are shell: their bugs show only at shutdown.
    scripts = sorted(p for p in (layout.deploy / "docker").glob("vf-*") if p.is_file())
    if scripts:
        code, out = _run([tool(install.SHELLCHECK.binary), "--shell=sh", *map(str, scripts)])
        if code != 0:
            problems.append(f"shellcheck: {out}")
    return problems


def check_compose(layout: Layout) -> list[str]:
    # composecheck: the loader of `docker compose config` (compose-go) - interpolation, the
    # compose-spec schema, and references between services, volumes and networks.
    code, out = _run([tool(install.COMPOSECHECK.binary), str(layout.compose)])
    return [f"compose: {out}"] if code != 0 else []


def check_examples(layout: Layout) -> list[str]:
    # The script is this checkout's; the docs and schemas it reads are the layout's.
    node = shutil.which("node")
    if node is None:
        raise CheckError("'node' is not on PATH (Node.js 18 or newer; `make setup` installs it)")
    modules = install.EXAMPLECHECK.modules
    if not (modules / "ajv").is_dir():
        raise CheckError(f"{modules} is not installed: run `python -m deploy.tools.install`")
    proc = subprocess.run([node, str(install.EXAMPLECHECK.source / "check.mjs"),
                           "--root", str(layout.root), "--modules", str(modules)],
                          capture_output=True, text=True, check=False, timeout=300)
    if proc.returncode == 0:
        return []
    # check.mjs writes one problem a line to stderr, the counts to stdout.
    return proc.stderr.strip().splitlines() or [proc.stdout.strip()]


CHECKS: dict[str, Callable[[Layout], list[str]]] = {
    "kustomize": check_kustomize,
    "kubeconform": check_kubeconform,
    "policy": check_policy,
    "promtool": check_promtool,
    "rule-sync": check_rule_sync,
    "strimzi-sync": check_strimzi_sync,
    "dashboard": check_dashboard,
    "metrics": check_metrics,
    "dockerfiles": check_dockerfiles,
    "compose": check_compose,
    "examples": check_examples,
}


def _rendered(layout: Layout) -> dict[str, str]:
    if not layout.rendered:
        problems = check_kustomize(layout)
        if problems:
            raise CheckError("; ".join(problems))
    return layout.rendered


def run_all(layout: Layout, only: list[str] | None = None) -> list[Outcome]:
    outcomes = []
    for name, check in CHECKS.items():
        if only and name not in only:
            continue
        try:
            problems = check(layout)
        except (CheckError, subprocess.TimeoutExpired, OSError, ValueError) as exc:
            problems = [str(exc)]
        outcomes.append(Outcome(name, problems))
    return outcomes
