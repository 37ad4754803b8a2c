"""What one measurement hands the runner: flat figures, a Markdown table, series to plot."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Figure = float | int | None


@dataclass
class Outcome:
    name: str
    figures: dict[str, Figure]  # flat JSON keys, e.g. overhead_p50_ms
    table: str  # Markdown, pasted into docs/benchmarks.md
    series: dict[str, Any] = field(default_factory=dict)  # what plot() draws
    notes: list[str] = field(default_factory=list)


def md_table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 1 else f"{value:.1f}"
    return str(value)
