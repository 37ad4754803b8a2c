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


def batch_axes(ax: Any, sizes: list[int], *, xlabel: str, ylabel: str, title: str) -> None:
    """The axes of a plot over batch sizes 1, 2, 4, 8, ...: log2, a tick at each size."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(x) for x in sizes])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
