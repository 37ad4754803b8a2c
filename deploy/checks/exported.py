"""The metric names the code exports, read from its source, and the few it may query besides.

Data flow: `exported_metrics(root)` parses every module of the code packages (`topics/`,
`pipeline/`, `consumers/`) with `ast` and collects each prometheus_client collector built
with a literal name, `Counter("vf_x", ...)` or `prometheus_client.Gauge(name="vf_y")`;
`sample_names()` expands a family to the series Prometheus actually stores (a Counter
`vf_x` is scraped as `vf_x_total`, a Histogram as `_bucket`/`_sum`/`_count`). Reading the
source rather than one class means a new module (the aggregator's metrics, say) is picked
up without this file changing; `tests/unit/deploy` checks the scan against a live
`WorkerMetrics` registry so the two cannot drift.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CODE_PACKAGES", "EXTERNAL_METRICS", "Family", "allowed_names", "exported_metrics",
           "sample_names"]

CODE_PACKAGES = ("topics", "pipeline", "consumers")

# Series that dashboards and rules may read although our code does not export them, each
# with who does. Anything else unknown is an error.
EXTERNAL_METRICS = {
    "up": "Prometheus itself, per scrape target",
    "kube_statefulset_status_replicas_ready": "kube-state-metrics (Kubernetes only)",
}

_COLLECTORS = {"Counter", "Gauge", "Histogram", "Summary", "Info", "Enum"}


@dataclass(frozen=True)
class Family:
    name: str
    kind: str
    source: str  # file:line, for error messages


def exported_metrics(root: Path) -> dict[str, Family]:
    """Metric families constructed in the code packages under `root`, by name."""
    found: dict[str, Family] = {}
    for package in CODE_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                family = _family(node, f"{path.relative_to(root)}")
                if family is not None:
                    found.setdefault(family.name, family)
    return found


def sample_names(family: Family) -> set[str]:
    """The series names Prometheus stores for one family (prometheus_client's exposition)."""
    base = family.name
    if family.kind == "Counter":
        base = base.removesuffix("_total")
        return {f"{base}_total", f"{base}_created"}
    if family.kind == "Histogram":
        return {f"{base}_bucket", f"{base}_sum", f"{base}_count", f"{base}_created"}
    if family.kind == "Summary":
        return {base, f"{base}_sum", f"{base}_count", f"{base}_created"}
    if family.kind == "Info":
        return {f"{base}_info"}
    return {base}


def allowed_names(root: Path) -> dict[str, str]:
    """Every series name a query may use -> where it comes from."""
    allowed = dict(EXTERNAL_METRICS)
    for family in exported_metrics(root).values():
        for name in sample_names(family):
            allowed[name] = family.source
    return allowed


def _family(node: ast.AST, where: str) -> Family | None:
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    kind = func.id if isinstance(func, ast.Name) else (
        func.attr if isinstance(func, ast.Attribute) else None)
    if kind not in _COLLECTORS:
        return None
    name_arg: ast.expr | None = node.args[0] if node.args else None
    for kw in node.keywords:
        if kw.arg == "name":
            name_arg = kw.value
    if not (isinstance(name_arg, ast.Constant) and isinstance(name_arg.value, str)):
        return None
    return Family(name=name_arg.value, kind=kind, source=f"{where}:{node.lineno}")
