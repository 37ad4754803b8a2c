"""Builds the shared runtime objects (store, engine, processor) from `Settings`, once."""

from __future__ import annotations

from dataclasses import dataclass

from consumers.metrics import WorkerMetrics
from pipeline.engines import EngineOptions, Synthesizer, create_engine
from pipeline.profiles import ProfileCache
from pipeline.speaker import SpeakerEncoder
from pipeline.storage import ObjectStore
from pipeline.synthesis import RequestProcessor
from pipeline.voices import ProfileResolver
from topics.config import Settings


def make_store(settings: Settings) -> ObjectStore:
    return ObjectStore(endpoint=settings.s3_endpoint, access_key=settings.s3_access_key,
                       secret_key=settings.s3_secret_key.reveal(), bucket=settings.s3_bucket,
                       region=settings.s3_region)


@dataclass(frozen=True)
class Runtime:
    settings: Settings
    store: ObjectStore
    engine: Synthesizer
    processor: RequestProcessor
    metrics: WorkerMetrics


def build_runtime(settings: Settings) -> Runtime:
    store = make_store(settings)
    engine = create_engine(settings.engine, EngineOptions(
        device=settings.device, precision=settings.precision,
        cosyvoice_model_dir=settings.cosyvoice_model_dir))
    engine.load()
    metrics = WorkerMetrics()
    encoder = SpeakerEncoder(device="cuda" if settings.device.startswith("cuda") else "cpu")
    encoder.load()  # at start-up, so the first request of a voice does not pay for it
    cache = ProfileCache(max_entries=settings.profile_cache_entries,
                         max_bytes=settings.profile_cache_mb * 2**20)
    profiles = ProfileResolver(store=store, engine=engine, cache=cache, encoder=encoder,
                               voice_ttl_seconds=settings.voice_ttl_seconds,
                               on_lookup=metrics.on_profile)
    processor = RequestProcessor(engine=engine, store=store, profiles=profiles,
                                 worker=settings.instance_id,
                                 presign_seconds=settings.presign_seconds,
                                 loudness_lufs=settings.loudness_lufs,
                                 device_slots=settings.max_inflight,
                                 quality_encoder=encoder if settings.quality_checks == "on"
                                 else None,
                                 on_oom_split=metrics.on_oom_retry)
    return Runtime(settings=settings, store=store, engine=engine, processor=processor,
                   metrics=metrics)
