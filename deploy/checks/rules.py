"""The PrometheusRule manifest, generated from the one rule file both stacks use.

Data flow: deploy/prometheus/alerts.yml (Prometheus rule-file format: what promtool checks
and the compose Prometheus loads) -> `prometheus_rule()` wraps its groups in a
`monitoring.coreos.com/v1` PrometheusRule -> `render()` is what
deploy/k8s/base/prometheusrule.yaml must contain byte for byte. `sync()` writes it,
`drift()` says whether the committed file is stale, so the operator's copy of an alert can
never differ from the one promtool checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["drift", "prometheus_rule", "render", "sync"]

HEADER = ("# GENERATED from deploy/prometheus/alerts.yml by `python -m deploy.checks sync-rules`;\n"
          "# edit that file, not this one (make check-deploy fails when they differ).\n")


def prometheus_rule(rules_file: Path) -> dict[str, Any]:
    groups = (yaml.safe_load(rules_file.read_text(encoding="utf-8")) or {}).get("groups")
    if not groups:
        raise ValueError(f"{rules_file}: no rule groups")
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "voicefactory",
                     "labels": {"app.kubernetes.io/name": "voicefactory"}},
        "spec": {"groups": groups},
    }


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (PromQL) as `|` blocks, so the manifest reads like the source."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render(rules_file: Path) -> str:
    body = yaml.dump(prometheus_rule(rules_file), Dumper=_Dumper, sort_keys=False, width=100,
                     allow_unicode=True)
    return HEADER + body


def sync(rules_file: Path, manifest: Path) -> bool:
    """Rewrite `manifest` from `rules_file`; True when it changed."""
    text = render(rules_file)
    if manifest.exists() and manifest.read_text(encoding="utf-8") == text:
        return False
    manifest.write_text(text, encoding="utf-8")
    return True


def drift(rules_file: Path, manifest: Path) -> list[str]:
    if not manifest.exists():
        return [f"{manifest} is missing; run `python -m deploy.checks sync-rules`"]
    if manifest.read_text(encoding="utf-8") != render(rules_file):
        return [f"{manifest} differs from what {rules_file} generates; run "
                "`python -m deploy.checks sync-rules`"]
    return []
