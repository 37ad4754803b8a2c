"""bench.flow at toy sizes: the rows it times and the figures it reports. It builds upstream's
own flow classes, so it needs upstream's CosyVoice source (skipped without it)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from bench import flow
from bench.runner import BENCHES
from pipeline.engines.cosyvoice_setup import source_paths
from tests.cosyvoice.conftest import source_setting

pytestmark = pytest.mark.filterwarnings("ignore:.*deprecated.*:FutureWarning")


def context(source: str) -> SimpleNamespace:
    return SimpleNamespace(pick=lambda quick, full: (1, 1, 12, 1),
                           base=SimpleNamespace(engine=SimpleNamespace(cosyvoice_source=source)))


def test_rows_timed_both_ways_and_the_figures_follow() -> None:
    try:
        source_paths(source_setting())
    except Exception as exc:
        pytest.skip(f"upstream CosyVoice source not found: {exc}")
    outcome = asyncio.run(flow.run(context(source_setting())))  # type: ignore[arg-type]
    rows = outcome.series["rows"]
    assert [r["batch"] for r in rows] == list(flow.SIZES)
    for row in rows:
        assert row["upstream_s"] > 0 and row["batched_s"] > 0
        assert row["gain"] == pytest.approx(row["upstream_s"] / row["batched_s"], rel=0.05)
    assert outcome.figures["flow_gain_at_8"] == rows[-1]["gain"]
    assert "flow" in BENCHES


def test_without_upstreams_source_it_says_so(tmp_path: object) -> None:
    outcome = asyncio.run(flow.run(context(str(tmp_path))))  # type: ignore[arg-type]
    assert outcome.figures == {}
    assert "not measured: upstream CosyVoice source not importable" in outcome.notes[0]
