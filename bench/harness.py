"""What every measurement needs from the real stack: isolated topics, voices, load, answers.

BenchContext (one per run: base settings, the local stack behind `bench.stack.LocalStack`, a
fresh bucket, the reference clip) -> settings()
gives each measurement its own topic prefix and consumer group -> register() puts voices in
the store the way `register_voice` does (the reference is validated once, then copied) ->
Load produces requests keyed by voice (paced at a rate, or all at once) and notes when each
was sent -> ResultLog reads `tts.results` in the background and notes when each answer
arrived -> Sampler records (t, value) series such as lag = sent - answered. The workers
themselves are in `bench.processes`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from minio import Minio

from bench.readers import ResultLog
from bench.scratch import delete_under, make_under
from bench.stack import LocalStack
from consumers.fleet.sending import RoutedSender, fleet_router, lane_sender
from consumers.fleet.view import FleetView
from consumers.gateway.failover import Failover
from consumers.kafka import make_producer
from consumers.settings import Settings
from consumers.wiring import make_store
from pipeline import keys
from pipeline.reference import check_reference
from pipeline.voices import sniff_extension
from topics.events import SynthesisRequest, VoiceRegistration
from topics.events import encode as encode_event
from topics.fleet import RouteLane
from topics.specs import (
    AUDIO,
    CONTROL,
    DLQ,
    FLEET,
    REQUESTS,
    REQUESTS_INTERACTIVE,
    REQUESTS_INTERACTIVE_SHARDS,
    REQUESTS_SHARDS,
    RESULTS,
    TopicSpec,
    topic_names,
)

# What a worker reads and writes: both request lanes, results, dead letters, streamed chunks,
# the control topic (a worker stops at start-up when one of those it reads is missing) and
# the fleet view (without it the worker serves, but no router can spread its voices).
WORKER_TOPICS = (REQUESTS, REQUESTS_INTERACTIVE, REQUESTS_SHARDS, REQUESTS_INTERACTIVE_SHARDS,
                 RESULTS, DLQ, AUDIO, CONTROL, FLEET)

log = logging.getLogger(__name__)


@dataclass
class BenchContext:
    base: Settings
    stack: LocalStack
    quick: bool
    work_dir: Path
    bucket: str
    reference: bytes
    registered: set[str] = field(default_factory=set)
    profile_compute_s: float | None = None  # one profile built by the real resolver, timed
    _encoder: Any = None
    _seed: Any = None  # the computed seed profile
    prefixes: list[str] = field(default_factory=list)  # handed out by settings(), for cleanup()

    @classmethod
    def create(cls, base: Settings, *, stack: LocalStack, quick: bool,
               work_dir: Path) -> BenchContext:
        work_dir.mkdir(parents=True, exist_ok=True)
        bucket = f"vf-bench-{uuid.uuid4().hex[:8]}"
        _minio(base).make_bucket(bucket)
        from consumers.clients.demo import make_reference

        reference = make_reference(work_dir / "reference.wav")
        report = check_reference(reference)
        if not report.ok:
            raise RuntimeError(f"bench reference rejected: {'; '.join(report.problems)}")
        return cls(base=base.with_overrides(store={"bucket": bucket}), stack=stack,
                   quick=quick, work_dir=work_dir, bucket=bucket, reference=reference)

    def pick(self, quick: Any, full: Any) -> Any:
        return quick if self.quick else full

    async def settings(self, name: str, *, engine: str = "bench",
                       specs: tuple[TopicSpec, ...] = WORKER_TOPICS,
                       **worker: Any) -> Settings:
        """Fresh topics (`specs`: a worker's topics unless told) under a prefix of their
        own, a group, the engine and `worker` overrides (WorkerSettings fields: max_batch=4,
        ...)."""
        prefix = f"bench-{name}-{uuid.uuid4().hex[:6]}."
        s = self.base.with_overrides(
            kafka={"topic_prefix": prefix}, engine={"name": engine},
            worker={"group_id": f"{prefix}synth", "instance_id": f"{prefix}w0",
                    "metrics_port": -1, "metrics_host": "127.0.0.1",
                    "session_timeout_ms": 10_000, **worker})
        self.prefixes.append(prefix)  # before the topics: a half-made set goes too
        await make_under(s.kafka, prefix, specs)
        return s

    async def cleanup(self) -> None:
        """Delete every topic under this run's prefixes (faust's changelogs included) and
        its bucket (1,000 references and every clip make a few hundred MB a run), so
        repeated runs do not fill the disk or the broker."""
        await delete_under(self.base.kafka, self.prefixes)
        await asyncio.to_thread(remove_bucket, self.base)

    def encoder(self) -> Any:
        """One loaded speaker encoder for the in-process resolvers of this run."""
        if self._encoder is None:
            from pipeline.speaker import SpeakerEncoder

            encoder = SpeakerEncoder(device="cpu")
            encoder.load()
            self._encoder = encoder
        return self._encoder

    def register(self, voices: list[str]) -> None:
        """The objects `register_voice` writes, for every voice not yet registered, and a
        stored profile for each (seed_profiles). The reference was validated once in
        create(), so it is not decoded again per voice."""
        todo = sorted(set(voices) - self.registered)
        if not todo:
            return
        self._put_voices(todo)
        self.seed_profiles(todo)
        self.registered.update(todo)

    def seed_profiles(self, voices: list[str]) -> float:
        """Store every voice's profile as if its first request had built it: one profile is
        computed through the real `ProfileResolver` (timed; returned), and since all bench
        voices share one reference, the others are that profile under their voice_id."""
        import dataclasses

        from pipeline.engines import create_engine
        from pipeline.profiles import ProfileCache, to_safetensors
        from pipeline.voices import ProfileResolver

        store = make_store(self.base.store)
        if self._seed is None:
            seed_voice = f"seed-{uuid.uuid4().hex[:8]}"
            self._put_voices([seed_voice])
            results: list[str] = []
            resolver = ProfileResolver(store=store, engine=create_engine("bench"),
                                       cache=ProfileCache(), encoder=self.encoder(),
                                       on_lookup=results.append)
            t0 = time.perf_counter()
            self._seed = resolver.resolve(seed_voice)
            self.profile_compute_s = time.perf_counter() - t0
            if results != ["miss"]:
                raise RuntimeError(f"seed profile was not computed: {results}")
        seed = self._seed

        def one(voice_id: str) -> None:
            profile = dataclasses.replace(seed, voice_id=voice_id)
            store.put(keys.profile_key(voice_id, seed.sha256, seed.engine),
                      to_safetensors(profile), content_type="application/octet-stream")

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(one, voices))
        return self.profile_compute_s or 0.0

    def _put_voices(self, todo: list[str]) -> None:
        store = make_store(self.base.store)
        ext = sniff_extension(self.reference)
        sha = hashlib.sha256(self.reference).hexdigest()

        def one(voice_id: str) -> None:
            ref_key = keys.voice_reference_key(voice_id, ext)
            store.put(ref_key, self.reference, content_type=f"audio/{ext}")
            event = VoiceRegistration(
                voice_id=voice_id, reference=f"s3://{store.bucket}/{ref_key}", sha256=sha,
                created_at=datetime.now(UTC).isoformat(timespec="seconds"), language="en")
            store.put(keys.voice_json_key(voice_id), encode_event(event),
                      content_type="application/json")

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(one, todo))


def _minio(settings: Settings) -> Minio:
    """A bare minio client: bucket creation and removal are not `ObjectStore` operations."""
    store = settings.store
    return Minio(store.endpoint.split("://", 1)[-1], access_key=store.access_key,
                 secret_key=store.secret_key.reveal(), secure=store.endpoint.startswith("https"))


def remove_bucket(settings: Settings) -> None:
    """Every object of the settings' bucket, then the bucket itself."""
    from minio.deleteobjects import DeleteObject

    client, bucket = _minio(settings), settings.store.bucket
    names = [o.object_name for o in client.list_objects(bucket, recursive=True)
             if o.object_name]
    for start in range(0, len(names), 1000):
        errors = list(client.remove_objects(
            bucket, [DeleteObject(n) for n in names[start:start + 1000]]))
        if errors:
            raise RuntimeError(f"could not delete {len(errors)} bench objects: {errors[0]}")
    client.remove_bucket(bucket)


# -- load and answers --------------------------------------------------------------------

class Load:
    """Produces requests keyed by voice ID (as external producers do) and notes send times;
    to the batch lane (tts.requests) unless `topic` names another (the interactive lane).
    `routed=True`: through the fleet router instead, as the gateway and `job run` send
    (consumers.fleet), with `done(request_id)` (ResultLog's on_answer) ending each one's
    count; `balance` overrides VF_ROUTE_BALANCE."""

    def __init__(self, settings: Settings, *, topic: str | None = None, routed: bool = False,
                 balance: float | None = None) -> None:
        self._settings = settings
        self._topic = topic or topic_names(settings.kafka.topic_prefix).requests
        self._routed = routed
        self._balance = balance
        self.sender: RoutedSender | None = None
        self.failover: Failover | None = None  # follow_answers() turns it on
        self._failover_task: asyncio.Task[None] | None = None
        self._view: FleetView | None = None
        self._producer: Any = None
        self.sent: dict[str, float] = {}  # request_id -> wall time of the send call
        self.acked: set[str] = set()
        self.failed: dict[str, str] = {}  # request_id -> why the broker did not take it
        self._pending: set[asyncio.Future[Any]] = set()

    async def __aenter__(self) -> Load:
        # No linger, as the gateway's producer: a paced request leaves when it is sent.
        self._producer = make_producer(self._settings.kafka, linger_ms=0)
        await self._producer.start()
        if self._routed:
            router, self._view = await fleet_router(self._settings, self._producer)
            lane: RouteLane = ("interactive" if self._topic.endswith(REQUESTS_INTERACTIVE.name)
                               else "batch")
            self.sender = lane_sender(self._producer,
                                      topic_names(self._settings.kafka.topic_prefix), lane,
                                      router, balance=self._balance)
        return self

    async def wait_fleet(self, workers: int, timeout_s: float) -> None:
        """Until the router's view has `workers` workers owning partitions of the lane, then
        two status intervals more (each worker's status after the last rebalance): a load
        sent earlier follows the view of a fleet still joining, in which the first worker
        owned every partition for a moment, and its voices' profiles land there."""
        assert self.sender is not None and self.sender.router is not None, "a routed Load"
        router, lane = self.sender.router, self.sender.lane
        deadline = time.monotonic() + timeout_s
        while len(seen := router.workers(lane)) < workers:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the fleet view holds {seen} after {timeout_s:.0f} s, "
                                   f"not {workers} workers")
            await asyncio.sleep(0.1)
        await asyncio.sleep(2 * self._settings.routing.fleet_interval_ms / 1000)

    async def __aexit__(self, *exc: object) -> None:
        await self.flush()
        if self._failover_task is not None:
            self._failover_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._failover_task
        if self._view is not None:
            await self._view.stop()
        await self._producer.stop()

    def done(self, request_id: str) -> None:
        if self.sender is not None:
            self.sender.done([request_id])
        if self.failover is not None:
            self.failover.forget([request_id])

    def follow_answers(self, answered: Callable[[str], bool]) -> None:
        """The gateway's failover for a routed Load: a request whose worker left the fleet
        view before it was `answered` is sent again elsewhere (consumers.gateway.failover)."""
        assert self.sender is not None, "a routed Load"
        self.failover = Failover(self.sender, chunks_of=lambda rid: int(answered(rid)),
                                 after_s=self._settings.routing.failover_ms / 1000)
        self._failover_task = asyncio.create_task(self.failover.run())

    async def send(self, request: SynthesisRequest) -> None:
        self.sent[request.request_id] = time.time()
        try:
            if self.sender is not None:
                route, future = await self.sender.send(request)
                if self.failover is not None:
                    self.failover.track(request, route, [])
            else:
                future = await self._producer.send(self._topic, encode_event(request),
                                                   key=request.voice_id.encode())
        except Exception as exc:  # the broker is down: the request was never produced
            self.failed[request.request_id] = repr(exc)
            return
        rid = request.request_id

        def noted(f: asyncio.Future[Any]) -> None:
            self._pending.discard(f)
            if f.cancelled() or f.exception() is not None:
                self.failed[rid] = repr(f.exception()) if not f.cancelled() else "cancelled"
            else:
                self.acked.add(rid)

        self._pending.add(future)
        future.add_done_callback(noted)

    async def burst(self, requests: list[SynthesisRequest]) -> None:
        for request in requests:
            await self.send(request)
        await self.flush()

    async def paced(self, requests: list[SynthesisRequest], rate: float) -> None:
        """Send at `rate` per second on an absolute schedule (no drift when a send is slow)."""
        start = time.monotonic()
        for i, request in enumerate(requests):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await self.send(request)

    async def flush(self) -> None:
        if self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)


class Sampler:
    """Calls `probe` every `interval_s` in the background and keeps (t, value) pairs, t
    in seconds since the sampler started."""

    def __init__(self, probe: Callable[[], float], interval_s: float = 0.2) -> None:
        self._probe = probe
        self._interval_s = interval_s
        self.t0 = time.monotonic()
        self.points: list[tuple[float, float]] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> Sampler:
        self._task = asyncio.create_task(self._loop())
        return self

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def _loop(self) -> None:
        while True:
            self.points.append((round(self.now(), 3), float(self._probe())))
            await asyncio.sleep(self._interval_s)

    async def stop(self) -> list[tuple[float, float]]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        return self.points


def lag_probe(load: Load, results: ResultLog) -> Callable[[], float]:
    """Requests sent and not yet answered: the backlog a user of the factory sees."""
    return lambda: float(len(load.sent) - len(load.failed) - results.answered)


async def warm(ctx: BenchContext, settings: Settings, voices: list[str], load: Load,
               results: ResultLog, timeout_s: float = 180) -> None:
    """One request per voice, answered, before anything is measured: profiles built, the
    group settled, connections open."""
    batch = [SynthesisRequest(request_id=f"warm-{uuid.uuid4().hex[:8]}-{i}", voice_id=v,
                              text="Warm up line.", language="en")
             for i, v in enumerate(sorted(set(voices)))]
    await load.burst(batch)
    missing = await results.wait_for({r.request_id for r in batch}, timeout_s)
    if missing:
        raise TimeoutError(f"warm-up: {len(missing)} of {len(batch)} requests unanswered "
                           f"after {timeout_s:.0f} s")
