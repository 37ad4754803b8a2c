"""Lint of a provisioned Grafana dashboard JSON, and the PromQL it holds.

Data flow: `lint(path)` loads the file and walks the dashboard: top-level fields, the
template variables, then every panel (rows' nested panels included) -> a list of problems,
each naming the panel by id and title. `queries(path)` yields every Prometheus expression
(panel targets and template-variable queries) with where it sits, for the PromQL parse
(promtool, in deploy.checks.runner) and the metric cross-check (deploy.checks.metrics).

Rules, each something Grafana would show as a broken or misleading panel:
unique integer panel ids; a type, a title and a gridPos inside the 24-column grid, with no
two panels overlapping; every non-row panel has a datasource that is a declared datasource
variable or a concrete uid, and at least one target; every target has a unique refId and a
non-empty expression; template variables have names and their datasources resolve.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Query", "lint", "queries"]

GRID_COLUMNS = 24
_PANEL_TYPES = {"timeseries", "stat", "gauge", "bargauge", "table", "heatmap", "row", "text",
                "piechart", "state-timeline", "logs"}


@dataclass(frozen=True)
class Query:
    where: str
    expr: str
    template: bool  # a template-variable query (label_values(...)), not a panel target


def load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the dashboard must be a JSON object")
    return data


def panels(dash: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dash.get("panels") or []:
        yield panel
        yield from panel.get("panels") or []  # a collapsed row carries its panels inside


def lint(path: Path) -> list[str]:
    try:
        dash = load(path)
    except ValueError as exc:
        return [str(exc)]
    problems = _top_level(dash)
    datasource_vars = _variables(dash, problems)
    seen_ids: set[int] = set()
    boxes: list[tuple[str, tuple[int, int, int, int]]] = []
    for panel in panels(dash):
        name = f"panel {panel.get('id')!r} ({panel.get('title') or 'untitled'})"
        problems += _panel(panel, name, seen_ids, datasource_vars)
        box = _box(panel, name, problems)
        if box is not None:
            problems += [f"{name} overlaps {other}" for other, b in boxes if _overlap(box, b)]
            boxes.append((name, box))
    return problems


def queries(path: Path) -> list[Query]:
    dash = load(path)
    out: list[Query] = []
    for var in (dash.get("templating") or {}).get("list") or []:
        if var.get("type") == "query":
            query = var.get("query")
            text = query.get("query") if isinstance(query, dict) else query
            if text:
                out.append(Query(f"variable ${var.get('name')}", str(text), template=True))
    for panel in panels(dash):
        for target in panel.get("targets") or []:
            if target.get("expr"):
                out.append(Query(f"panel {panel.get('id')} ({panel.get('title')}) "
                                 f"target {target.get('refId')}", target["expr"],
                                 template=False))
    return out


def _top_level(dash: dict[str, Any]) -> list[str]:
    problems = []
    for key, kind in (("title", str), ("uid", str), ("schemaVersion", int), ("panels", list)):
        if not isinstance(dash.get(key), kind) or not dash.get(key):
            problems.append(f"dashboard: {key} missing or not a non-empty {kind.__name__}")
    uid = dash.get("uid")
    if isinstance(uid, str) and len(uid) > 40:
        problems.append(f"dashboard: uid {uid!r} is longer than Grafana's 40 characters")
    return problems


def _variables(dash: dict[str, Any], problems: list[str]) -> set[str]:
    """Names of the datasource variables; problems of any variable are appended."""
    variables = (dash.get("templating") or {}).get("list") or []
    ds_vars = {v.get("name") for v in variables if v.get("type") == "datasource"}
    for var in variables:
        if not var.get("name") or not var.get("type"):
            problems.append(f"template variable {var!r} needs a name and a type")
        if var.get("type") == "query" and not _datasource_ok(var.get("datasource"), ds_vars):
            problems.append(f"variable ${var.get('name')}: datasource {var.get('datasource')!r}"
                            " is not a declared datasource variable or a uid")
    return {str(v) for v in ds_vars}


def _panel(panel: dict[str, Any], name: str, seen_ids: set[int],
           ds_vars: set[str]) -> list[str]:
    problems = []
    pid = panel.get("id")
    if not isinstance(pid, int) or isinstance(pid, bool):
        problems.append(f"{name}: id must be an integer")
    elif pid in seen_ids:
        problems.append(f"{name}: id {pid} is used twice")
    else:
        seen_ids.add(pid)
    if panel.get("type") not in _PANEL_TYPES:
        problems.append(f"{name}: unknown panel type {panel.get('type')!r}")
    if not panel.get("title"):
        problems.append(f"{name}: no title")
    if panel.get("type") in ("row", "text"):
        return problems
    if not _datasource_ok(panel.get("datasource"), ds_vars):
        problems.append(f"{name}: datasource {panel.get('datasource')!r} is not a declared "
                        "datasource variable or a uid")
    targets = panel.get("targets") or []
    if not targets:
        problems.append(f"{name}: no targets (an empty panel)")
    ref_ids: set[str] = set()
    for target in targets:
        ref = target.get("refId")
        if not ref or ref in ref_ids:
            problems.append(f"{name}: target refId {ref!r} missing or repeated")
        ref_ids.add(str(ref))
        if not str(target.get("expr") or "").strip():
            problems.append(f"{name}: target {ref!r} has no expression")
        if "datasource" in target and not _datasource_ok(target["datasource"], ds_vars):
            problems.append(f"{name}: target {ref!r} datasource {target['datasource']!r} "
                            "does not resolve")
    return problems


def _datasource_ok(ds: object, ds_vars: set[str | None] | set[str]) -> bool:
    if not isinstance(ds, dict) or not ds.get("type") or not ds.get("uid"):
        return False
    uid = str(ds["uid"])
    if uid.startswith("$"):
        return uid.strip("${}") in ds_vars
    return True


def _box(panel: dict[str, Any], name: str,
         problems: list[str]) -> tuple[int, int, int, int] | None:
    grid = panel.get("gridPos")
    if not isinstance(grid, dict) or not all(isinstance(grid.get(k), int) for k in "hwxy"):
        problems.append(f"{name}: gridPos needs integer h, w, x, y")
        return None
    x, y, w, h = grid["x"], grid["y"], grid["w"], grid["h"]
    if w <= 0 or h <= 0 or x < 0 or y < 0 or x + w > GRID_COLUMNS:
        problems.append(f"{name}: gridPos {grid} is outside the {GRID_COLUMNS}-column grid")
        return None
    return x, y, w, h


def _overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    ax, ay, aw, ah = a
    bx, by, bw, bh = b
    return ax < bx + bw and bx < ax + aw and ay < by + bh and by < ay + ah
