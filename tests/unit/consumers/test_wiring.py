"""The one wiring function per process builds what the CLI runs, without any server."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from consumers.health import Heartbeat
from consumers.settings import AggregatorSettings, EngineSettings, Settings, WorkerSettings
from consumers.wiring import build_aggregator, build_worker, make_store
from consumers.worker.loop import SynthesisWorker
from consumers.worker.shape import WorkerShape


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


def test_the_worker_store_has_a_connection_for_every_dispatcher() -> None:
    settings = Settings(engine=EngineSettings(name="bench"),
                        worker=WorkerSettings(max_inflight=6, quality_checks="off",
                                              metrics_port=-1))
    # 3 x max_inflight dispatchers (2 x for both lanes, 1 x interactive only), store, spare
    assert WorkerShape.of(settings.worker).threads == 18
    runtime = build_worker(settings)
    assert runtime.store.pool_size == 18 + 2
    # one shape for every part: the gate's slots, the worker's threads and fleet slots
    assert runtime.worker.shape == WorkerShape(6, 1)
    assert runtime.worker._threads._pool._max_workers == 18
    small = replace(settings, worker=replace(settings.worker, max_inflight=1))
    assert build_worker(small).store.pool_size == 8  # the store's own default is the floor


async def test_a_worker_built_without_loading_loads_in_its_warm_up() -> None:
    settings = Settings(engine=EngineSettings(name="bench"),
                        worker=WorkerSettings(quality_checks="off", metrics_port=-1))
    worker = build_worker(settings, load=False).worker
    assert worker._warm_up is not None
    assert (await worker.readiness())[1]["engine_loaded"] is False
    worker._warming = True  # as run() sets it around the warm-up: the pod is not dead
    worker.heartbeat = Heartbeat(clock=lambda: 1e9)
    worker.heartbeat._last = 0.0
    assert worker.liveness()[0] is True
    worker._warming = False
    assert worker.liveness()[0] is False
    worker._warm_up()
    assert (await worker.readiness())[1]["engine_loaded"] is True
