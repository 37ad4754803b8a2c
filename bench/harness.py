"""What every measurement needs from the real stack: isolated topics, voices, load, answers.

BenchContext (one per run: base settings, a fresh bucket, the reference clip) -> settings()
gives each measurement its own topic prefix and consumer group -> register() puts voices in
the store the way `register_voice` does (the reference is validated once, then copied) ->
Load produces requests keyed by voice (paced at a rate, or all at once) and notes when each
was sent -> ResultLog reads `tts.results` in the background and notes when each answer
arrived -> Sampler records (t, value) series such as lag = sent - answered. Workers run
either in this process (InProcessWorker, the same objects the CLI builds) or as
`python -m voicefactory worker` subprocesses (WorkerProcess) where a measurement needs a
process of its own: RSS, py-spy, kill -9.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition
from minio import Minio

from consumers.kafka import make_consumer, make_producer
from consumers.wiring import Runtime, build_runtime, make_store
from consumers.worker.loop import SynthesisWorker
from pipeline import keys
from pipeline.reference import check_reference
from pipeline.voices import sniff_extension
from topics.admin import admin_client, create_topics
from topics.config import Settings
from topics.events import SynthesisRequest, SynthesisResult, VoiceRegistration, decode_result
from topics.events import encode as encode_event
from topics.specs import REQUESTS, RESULTS, topic_names

log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[1]


@dataclass
class BenchContext:
    base: Settings
    quick: bool
    work_dir: Path
    bucket: str
    reference: bytes
    registered: set[str] = field(default_factory=set)
    profile_compute_s: float | None = None  # one profile built by the real resolver, timed
    _encoder: Any = None
    _seed: Any = None  # the computed seed profile
    topics: list[str] = field(default_factory=list)  # created by settings(), for cleanup()

    @classmethod
    def create(cls, base: Settings, *, quick: bool, work_dir: Path) -> BenchContext:
        work_dir.mkdir(parents=True, exist_ok=True)
        bucket = f"vf-bench-{uuid.uuid4().hex[:8]}"
        endpoint = base.s3_endpoint.split("://", 1)[-1]
        client = Minio(endpoint, access_key=base.s3_access_key,
                       secret_key=base.s3_secret_key.reveal(),
                       secure=base.s3_endpoint.startswith("https"))
        client.make_bucket(bucket)
        from consumers.clients.demo import make_reference

        reference = make_reference(work_dir / "reference.wav")
        report = check_reference(reference)
        if not report.ok:
            raise RuntimeError(f"bench reference rejected: {'; '.join(report.problems)}")
        return cls(base=base.with_overrides(s3_bucket=bucket), quick=quick, work_dir=work_dir,
                   bucket=bucket, reference=reference)

    def pick(self, quick: Any, full: Any) -> Any:
        return quick if self.quick else full

    async def settings(self, name: str, **overrides: Any) -> Settings:
        """Fresh topics (all of DESIGN.md's) under a prefix of their own, and a group."""
        prefix = f"bench-{name}-{uuid.uuid4().hex[:6]}."
        s = self.base.with_overrides(topic_prefix=prefix, group_id=f"{prefix}synth",
                                     instance_id=f"{prefix}w0", metrics_port=-1,
                                     session_timeout_ms=10_000, **overrides)
        admin = admin_client(s.kafka_bootstrap)
        await admin.start()
        try:
            await create_topics(admin, prefix=prefix, specs=(REQUESTS, RESULTS))
        finally:
            await admin.close()
        self.topics += [prefix + REQUESTS.name, prefix + RESULTS.name]
        return s

    async def cleanup(self) -> None:
        """Delete this run's topics and its bucket (1,000 references and every clip make
        a few hundred MB a run), so repeated runs do not fill the disk."""
        admin = admin_client(self.base.kafka_bootstrap)
        await admin.start()
        try:
            existing = set(await admin.list_topics())
            doomed = [t for t in self.topics if t in existing]
            if doomed:
                await admin.delete_topics(doomed)
        finally:
            await admin.close()
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

        store = make_store(self.base)
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
        store = make_store(self.base)
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


def remove_bucket(settings: Settings) -> None:
    """Every object of the settings' bucket, then the bucket itself."""
    from minio.deleteobjects import DeleteObject

    endpoint = settings.s3_endpoint.split("://", 1)[-1]
    client = Minio(endpoint, access_key=settings.s3_access_key,
                   secret_key=settings.s3_secret_key.reveal(),
                   secure=settings.s3_endpoint.startswith("https"))
    names = [o.object_name for o in client.list_objects(settings.s3_bucket, recursive=True)
             if o.object_name]
    for start in range(0, len(names), 1000):
        errors = list(client.remove_objects(
            settings.s3_bucket, [DeleteObject(n) for n in names[start:start + 1000]]))
        if errors:
            raise RuntimeError(f"could not delete {len(errors)} bench objects: {errors[0]}")
    client.remove_bucket(settings.s3_bucket)


# -- environment for workers -------------------------------------------------------------

def worker_env(settings: Settings, **extra: str) -> dict[str, str]:
    """VF_* variables that make `voicefactory worker` use exactly `settings`."""
    env = {
        "VF_KAFKA_BOOTSTRAP": settings.kafka_bootstrap, "VF_TOPIC_PREFIX": settings.topic_prefix,
        "VF_S3_ENDPOINT": settings.s3_endpoint, "VF_S3_ACCESS_KEY": settings.s3_access_key,
        "VF_S3_SECRET_KEY": settings.s3_secret_key.reveal(), "VF_S3_BUCKET": settings.s3_bucket,
        "VF_GROUP_ID": settings.group_id, "VF_INSTANCE_ID": settings.instance_id,
        "VF_ENGINE": settings.engine, "VF_MAX_BATCH": str(settings.max_batch),
        "VF_MAX_INFLIGHT": str(settings.max_inflight),
        "VF_BATCH_WAIT_MS": str(settings.batch_wait_ms),
        "VF_QUEUE_CAPACITY": str(settings.queue_capacity),
        "VF_SESSION_TIMEOUT_MS": str(settings.session_timeout_ms),
        "VF_METRICS_PORT": str(settings.metrics_port), "VF_METRICS_HOST": "127.0.0.1",
    }
    env.update(extra)
    return env


@contextlib.contextmanager
def patched_environ(values: Mapping[str, str]) -> Iterator[None]:
    """Engines read their knobs (VF_BENCH_*) from the environment when they are built."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class InProcessWorker:
    """A SynthesisWorker on this event loop, built as `voicefactory worker` builds it."""

    def __init__(self, settings: Settings, engine_env: Mapping[str, str] | None = None) -> None:
        with patched_environ(engine_env or {}):
            self.runtime: Runtime = build_runtime(settings)
        self.settings = settings
        self.worker = SynthesisWorker(settings=settings, processor=self.runtime.processor,
                                      metrics=self.runtime.metrics)
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self.worker.run())

    async def stop(self, timeout_s: float = 60) -> None:
        self.worker.stop()
        if self.task is not None:
            await asyncio.wait_for(self.task, timeout_s)

    def assignment(self) -> set[int]:
        consumer = self.worker._consumer
        return {tp.partition for tp in consumer.assignment()} if consumer else set()


class WorkerProcess:
    """`python -m voicefactory worker` (or another worker module) with the given settings
    and engine knobs, in a process of its own."""

    def __init__(self, settings: Settings, log_path: Path, *, module: str = "voicefactory",
                 args: list[str] | None = None, env: Mapping[str, str] | None = None) -> None:
        self.log_path = log_path
        full_env = dict(os.environ)
        full_env.update(worker_env(settings, **(env or {})))
        argv = [sys.executable, "-m", module,
                *(["worker", "--log-format", "text"] if args is None else args)]
        with open(log_path, "ab") as out:
            self.proc = subprocess.Popen(argv, cwd=REPO, env=full_env, stdout=out,
                                         stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def wait_log(self, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in self.log_text():
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}:\n"
                                   f"{self.log_text()[-2000:]}")
            await asyncio.sleep(0.2)
        raise TimeoutError(f"{text!r} not in {self.log_path} after {timeout_s:.0f} s")

    async def stop(self, timeout_s: float = 60) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                await asyncio.to_thread(self.proc.wait, timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait, 10)


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


# -- load and answers --------------------------------------------------------------------

class Load:
    """Produces requests keyed by voice ID (as every producer must) and notes send times."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._topic = topic_names(settings.topic_prefix).requests
        self._producer: Any = None
        self.sent: dict[str, float] = {}  # request_id -> wall time of the send call
        self.acked: set[str] = set()
        self.failed: dict[str, str] = {}  # request_id -> why the broker did not take it
        self._pending: set[asyncio.Future[Any]] = set()

    async def __aenter__(self) -> Load:
        self._producer = make_producer(self._settings, linger_ms=1)
        await self._producer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.flush()
        await self._producer.stop()

    async def send(self, request: SynthesisRequest) -> None:
        self.sent[request.request_id] = time.time()
        try:
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


class ResultLog:
    """Every answer on the results topic of one prefix, with the wall time it arrived."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._task: asyncio.Task[None] | None = None
        self._consumer: Any = None
        self.arrivals: list[tuple[float, SynthesisResult]] = []
        self.first: dict[str, tuple[float, SynthesisResult]] = {}

    async def __aenter__(self) -> ResultLog:
        consumer = make_consumer(self._settings, enable_auto_commit=False, group_id=None)
        await consumer.start()
        topic = topic_names(self._settings.topic_prefix).results
        tps = [TopicPartition(topic, p) for p in range(RESULTS.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        self._consumer = consumer
        self._task = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._consumer.stop()

    async def _read(self) -> None:
        while True:
            try:
                batches = await self._consumer.getmany(timeout_ms=100)
            except Exception as exc:  # broker restarts: keep reading once it is back
                log.debug("result read failed: %s", exc)
                await asyncio.sleep(0.5)
                continue
            now = time.time()
            for records in batches.values():
                for rec in records:
                    result = decode_result(rec.value or b"{}")
                    self.arrivals.append((now, result))
                    self.first.setdefault(result.request_id, (now, result))

    @property
    def answered(self) -> int:
        return len(self.first)

    def duplicates(self) -> int:
        return len(self.arrivals) - len(self.first)

    async def wait_for(self, wanted: set[str], timeout_s: float) -> set[str]:
        """Wait until every wanted ID is answered; returns those still missing."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            missing = wanted - self.first.keys()
            if not missing:
                return set()
            await asyncio.sleep(0.1)
        return wanted - self.first.keys()


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
