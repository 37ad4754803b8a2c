"""One wiring function per process: settings in, the process's objects out.

    Settings --make_store(settings.store)--> ObjectStore
             --build_worker(settings)------> WorkerRuntime: store, engine (loaded), speaker
                                             encoder, profile cache + resolver, processor,
                                             metrics, and the SynthesisWorker over them
             --build_aggregator(settings)--> JobAggregator (faust app) with its store

Used by the CLI, the demo, the benchmarks and the integration fixtures, so each of them runs
exactly the objects `voicefactory worker` runs. The engines, torch and the worker loop are
imported inside build_worker: the aggregator and the small clients use make_store without
loading any of them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from consumers.metrics import WorkerMetrics
from consumers.settings import Settings, StoreSettings, process_name
from pipeline.storage import DEFAULT_POOL_SIZE, ObjectStore

if TYPE_CHECKING:
    from consumers.aggregator.app import JobAggregator
    from consumers.worker.loop import SynthesisWorker
    from pipeline.engines import Synthesizer
    from pipeline.synthesis import RequestProcessor


def make_store(store: StoreSettings, *, pool_size: int = DEFAULT_POOL_SIZE) -> ObjectStore:
    return ObjectStore(endpoint=store.endpoint, access_key=store.access_key,
                       secret_key=store.secret_key.reveal(), bucket=store.bucket,
                       region=store.region, pool_size=pool_size)


@dataclass(frozen=True)
class WorkerRuntime:
    """A synthesis worker and the objects it is made of (tests and benchmarks look inside)."""

    settings: Settings
    store: ObjectStore
    engine: Synthesizer
    processor: RequestProcessor
    metrics: WorkerMetrics
    worker: SynthesisWorker


def build_worker(settings: Settings, *, load: bool = True,
                 **worker_options: Any) -> WorkerRuntime:
    """Everything `voicefactory worker` runs; `worker_options` go to SynthesisWorker
    (retry_base_s in tests). The engine and the speaker encoder load before the worker joins
    its group, so no partition is assigned to a process that cannot serve: here (`load`), or
    with `load=False` inside `worker.run()` after its health server started, so /readyz says
    `engine_loaded: false` (and /healthz stays alive) while a large model loads."""
    from consumers.worker.gate import LaneGate
    from consumers.worker.loop import SynthesisWorker
    from consumers.worker.shape import WorkerShape
    from pipeline.engines import create_engine
    from pipeline.profiles import ProfileCache
    from pipeline.speaker import SpeakerEncoder
    from pipeline.synthesis import RequestProcessor
    from pipeline.voices import ProfileResolver

    w = settings.worker
    name = process_name(w.instance_id)  # empty VF_INSTANCE_ID: a dynamic member
    shape = WorkerShape.of(w)  # dispatchers, device slots, threads: shape.py
    gate = LaneGate.for_shape(shape, batch_share=w.batch_min_share)  # device slots, by lane
    # One keep-alive connection for each thread that can talk to S3 at once (docs/benchmarks.md,
    # capacity).
    store = make_store(settings.store,
                       pool_size=max(DEFAULT_POOL_SIZE, shape.store_connections))
    engine = create_engine(settings.engine.name, settings.engine.options())
    metrics = WorkerMetrics()
    encoder = SpeakerEncoder(device="cuda" if settings.engine.device.startswith("cuda")
                             else "cpu")
    loaded = threading.Event()

    def warm_up() -> None:
        engine.load()
        encoder.load()  # at start-up, so the first request of a voice does not pay for it
        loaded.set()

    if load:
        warm_up()
    cache = ProfileCache(max_entries=w.profile_cache_entries,
                         max_bytes=w.profile_cache_mb * 2**20)
    profiles = ProfileResolver(store=store, engine=engine, cache=cache, encoder=encoder,
                               voice_ttl_seconds=w.voice_ttl_seconds,
                               on_lookup=metrics.on_profile)
    processor = RequestProcessor(engine=engine, store=store, profiles=profiles,
                                 worker=name,
                                 presign_seconds=settings.store.presign_seconds,
                                 loudness_lufs=w.loudness_lufs,
                                 device_slots=shape.batch_slots,  # unused beside the gate
                                 device_gate=gate,
                                 quality_encoder=encoder if w.quality_checks == "on" else None,
                                 on_oom_split=metrics.on_oom_retry)
    worker = SynthesisWorker(settings=settings, processor=processor, metrics=metrics,
                             engine_ready=loaded.is_set, warm_up=None if load else warm_up,
                             device_gate=gate, hot_voices=cache.voices, store=store,
                             name=name, **worker_options)
    return WorkerRuntime(settings=settings, store=store, engine=engine, processor=processor,
                         metrics=metrics, worker=worker)


def build_aggregator(settings: Settings, *, datadir: Path | None = None,
                     tick_s: float | None = None) -> JobAggregator:
    """The job aggregator's faust app; its folder defaults to <state dir>/aggregator."""
    from consumers.aggregator.app import JobAggregator

    return JobAggregator(settings, store=make_store(settings.store),
                         datadir=datadir or settings.aggregator.datadir_path(), tick_s=tick_s)
