"""bench.gateway's figures and plot from given timings (the requests themselves run against
the stack: `voicefactory bench --only gateway`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

from bench import gateway
from bench.runner import BENCHES, REQUIRED, merge
from consumers.gateway.speech import FORMATS


class _Ctx:
    quick = True

    def __init__(self, tmp_path: Path) -> None:
        self.work_dir = tmp_path

    async def settings(self, name: str, **_: Any) -> Any:
        from consumers.settings import Settings

        return Settings().with_overrides(kafka={"topic_prefix": f"bench-{name}-x."})


async def test_every_format_gets_its_figures_and_the_worst_p99_is_the_headline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    async def timings(settings: Any, formats: list[str], count: int,
                      first_chunk_s: float) -> tuple[dict[str, list[float]], dict[str, Any]]:
        seen.update(keys=settings.gateway.keys_file, group=settings.gateway.group_id,
                    count=count, first=first_chunk_s)
        after = {fmt: [3.0] * count for fmt in formats}
        after["flac"] = [9.0] * (count - 2)  # two failed
        return after, {}

    monkeypatch.setattr(gateway, "run_requests", timings)
    out = await gateway.run(_Ctx(tmp_path))  # type: ignore[arg-type]
    figures = out.figures
    assert seen["count"] == gateway.COUNT[True] and seen["first"] == 0.2
    assert seen["keys"].startswith(str(tmp_path)) and seen["group"] == "bench-gateway-x.gateway"
    assert {f"gateway_first_byte_p99_ms_{fmt}" for fmt in FORMATS} <= set(figures)
    assert figures["gateway_first_byte_p99_ms"] == 9.0
    assert figures["gateway_first_byte_p50_ms_pcm"] == 3.0
    assert figures["gateway_failed"] == 2
    assert "| flac | 28 | 2 |" in out.table
    fig, ax = plt.subplots()
    gateway.plot(out.series, ax)
    plt.close(fig)


async def test_a_format_with_no_answer_leaves_the_headline_unknown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def none_for_opus(_s: Any, formats: list[str], count: int,
                            _first: float) -> tuple[dict[str, list[float]], dict[str, Any]]:
        return {fmt: ([] if fmt == "opus" else [2.0] * count) for fmt in formats}, {}

    monkeypatch.setattr(gateway, "run_requests", none_for_opus)
    figures = (await gateway.run(_Ctx(tmp_path))).figures  # type: ignore[arg-type]
    assert figures["gateway_first_byte_p99_ms_opus"] is None
    assert figures["gateway_first_byte_p99_ms"] is None  # not the best of the rest
    assert figures["gateway_failed"] == gateway.COUNT[True]


def test_the_headline_is_a_required_key_and_the_section_runs_before_route() -> None:
    assert BENCHES["gateway"] is gateway
    assert "gateway_first_byte_p99_ms" in REQUIRED
    assert merge([])["gateway_first_byte_p99_ms"] is None
