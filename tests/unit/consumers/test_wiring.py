"""The one wiring function per process builds what the CLI runs, without any server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from consumers.settings import AggregatorSettings, EngineSettings, Settings, WorkerSettings
from consumers.wiring import build_aggregator, build_worker, make_store
from consumers.worker.loop import SynthesisWorker


def test_importing_the_wiring_loads_no_engine_and_no_torch() -> None:
    """The aggregator and the small clients take make_store from here."""
    code = ("import sys, consumers.wiring; "
            "print(sorted(m for m in ('torch', 'pipeline.engines', 'consumers.worker.loop') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[3])
    assert out.stdout.strip() == "[]"


def test_the_store_comes_from_the_store_group() -> None:
    store = make_store(Settings.from_env({"VF_S3_BUCKET": "clips"}).store)
    assert store.bucket == "clips"


def test_build_worker_wires_the_settings_into_every_part() -> None:
    settings = Settings(engine=EngineSettings(name="bench"),
                        worker=WorkerSettings(profile_cache_entries=7, profile_cache_mb=3,
                                              voice_ttl_seconds=2, quality_checks="off",
                                              instance_id="w-test", metrics_port=-1))
    runtime = build_worker(settings, retry_base_s=0.05)
    assert isinstance(runtime.worker, SynthesisWorker)
    assert runtime.worker.retry.base_delay_s == 0.05
    assert runtime.settings is settings and runtime.store.bucket == "voicefactory"
    cache = runtime.processor._profiles.cache
    assert (cache.max_entries, cache.max_bytes) == (7, 3 * 2**20)


def test_build_aggregator_puts_faust_under_the_state_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_STATE_DIR", str(tmp_path))
    agg = build_aggregator(Settings(aggregator=AggregatorSettings(port=-1)))
    assert Path(str(agg.app.conf.datadir)) == tmp_path / "aggregator"
    explicit = build_aggregator(Settings(aggregator=AggregatorSettings(
        port=-1, datadir=str(tmp_path / "elsewhere"))))
    assert Path(str(explicit.app.conf.datadir)) == tmp_path / "elsewhere"
