"""Jobs end to end on the real stack: `job run` -> worker -> faust aggregator -> tts.jobs.

The aggregator runs as its own process (`python -m voicefactory aggregator`), as in
production, so that it can be killed with SIGKILL and restarted on the same changelog.
"""

from __future__ import annotations

import asyncio
import http.client
import itertools
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from consumers.aggregator.emit import OUTBOX_OFFSET, OUTBOX_PARTITION, JobEmitter
from consumers.aggregator.state import JobState, merge
from consumers.clients.jobs import put_manifest, run_job
from consumers.clients.scripts import Script, parse_script
from consumers.kafka import make_consumer, make_producer
from consumers.settings import Settings
from consumers.wiring import make_store
from pipeline.audio import decode
from pipeline.keys import job_json_key, job_subtitles_key, job_track_key
from pipeline.subtitles import parse_srt
from tests.integration.conftest import RunningWorker
from tests.integration.test_worker import _read_all
from tests.integration.workers import REPO, worker_env
from topics.events import (
    AudioRef,
    JobCompleted,
    JobRef,
    SynthesisResult,
    decode_job,
    decode_result,
    encode,
)
from topics.specs import topic_names

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

LINES = [  # (voice, language, text): a narrator and two characters, Mandarin and English
    ("narrator", "zh", "第十二集。工厂的夜班开始了。"),
    ("li", "zh", "你听见那个声音了吗？"),
    ("sam", "en", "It is only the night shift."),
    ("narrator", "zh", "机器一台接一台地醒来。"),
    ("li", "zh", "我们得快点走。"),
    ("sam", "en", "Wait, look at the third line."),
    ("narrator", "en", "The third line had stopped."),
    ("li", "zh", "谁关掉的？"),
    ("sam", "en", "Nobody. It stopped by itself."),
    ("narrator", "zh", "灯光闪了一下。"),
    ("li", "zh", "快跑！"),
    ("sam", "en", "Run!"),
]


# --- helpers ------------------------------------------------------------------------------


class Aggregator:
    """`voicefactory aggregator` as a child process with its log in a file."""

    def __init__(self, settings: Settings, tmp: Path, timeout_s: int = 120,
                 port: int = -1) -> None:
        self.settings = settings
        self.log = tmp / "aggregator.log"
        self.datadir = tmp / "faust"
        self.timeout_s = timeout_s
        self.port = port  # -1: no web server
        self.proc: subprocess.Popen[bytes] | None = None
        self._starts = 0

    def start(self) -> None:
        env = worker_env(self.settings, VF_AGGREGATOR_PORT=str(self.port),
                         VF_AGGREGATOR_DATADIR=str(self.datadir),
                         VF_JOB_TIMEOUT_SECONDS=str(self.timeout_s))
        self._starts += 1
        with open(self.log, "ab") as out:
            out.write(f"--- start {self._starts}\n".encode())
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "voicefactory", "aggregator", "--log-format", "text"],
                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)

    async def ready(self, timeout_s: float = 90) -> None:
        """Until this start has its partitions (our own log line after faust's recovery)."""
        deadline = time.monotonic() + timeout_s
        marker = f"--- start {self._starts}\n"
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, self.tail()
            text = self.log.read_text(errors="replace")
            if "aggregating" in text[text.rindex(marker):]:
                return
            await asyncio.sleep(0.2)
        raise AssertionError(f"aggregator not ready in {timeout_s} s:\n{self.tail()}")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    async def scrape(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """GET /metrics: every sample by name and sorted labels."""
        def get() -> tuple[int, str]:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            try:
                conn.request("GET", "/metrics")
                response = conn.getresponse()
                return response.status, response.read().decode()
            finally:
                conn.close()

        status, text = await asyncio.to_thread(get)
        assert status == 200, text
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def aggregator(settings: Settings, tmp_path: Path) -> Iterator[Aggregator]:
    agg = Aggregator(settings, tmp_path)
    yield agg
    if agg.proc is not None and agg.proc.poll() is None:
        agg.proc.kill()
        agg.proc.wait(10)


@pytest.fixture
def voices(settings: Settings, tmp_path: Path) -> list[str]:
    from consumers.clients.demo import REFERENCE_TEXT, make_reference
    from pipeline.voices import register_voice

    reference = make_reference(tmp_path / "reference.wav")
    store = make_store(settings.store)
    for voice_id in ("narrator", "li", "sam"):
        register_voice(store, voice_id=voice_id, reference=reference,
                       prompt_text=REFERENCE_TEXT, language="en")
    return ["narrator", "li", "sam"]


def _script(job_id: str, lines: list[tuple[str, str, str]], **options: object) -> Script:
    return parse_script({"job_id": job_id, **options,
                         "lines": [{"voice": v, "language": lang, "text": t}
                                   for v, lang, t in lines]}, source="test")


async def _job_events(settings: Settings, job_id: str) -> list[JobCompleted]:
    values = await _read_all(settings, topic_names(settings.kafka.topic_prefix).jobs, timeout_s=10)
    return [e for e in map(decode_job, values) if e.job_id == job_id]


async def _wait_for_job(settings: Settings, job_id: str, timeout_s: float,
                        agg: Aggregator) -> JobCompleted:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        events = await _job_events(settings, job_id)
        if events:
            return events[0]
        await asyncio.sleep(0.5)
    raise AssertionError(f"no job event for {job_id} in {timeout_s} s:\n{agg.tail()}")


async def _results_for(settings: Settings, job_id: str) -> list[bytes]:
    values = await _read_all(settings, topic_names(settings.kafka.topic_prefix).results,
                             timeout_s=10)
    return [v for v in values if (r := decode_result(v)).job and r.job.id == job_id]


async def _produce(settings: Settings, topic: str, values: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap, acks="all")
    await producer.start()
    try:
        for key, value in values:
            await producer.send_and_wait(topic, value, key=key)
    finally:
        await producer.stop()


def _check_timeline_and_subtitles(settings: Settings, event: JobCompleted) -> None:
    """Clips in index order; SRT cue i lasts clip i's duration and starts at its span."""
    store = make_store(settings.store)
    assert [c.index for c in event.clips] == list(range(len(LINES)))
    assert [c.text for c in event.clips] == [t for _, _, t in LINES]
    assert event.subtitles == f"s3://{settings.store.bucket}/jobs/{event.job_id}/subtitles.srt"
    srt = store.get(event.subtitles.split("/", 3)[3])
    assert srt is not None
    cues = parse_srt(srt.decode())
    assert len(cues) == len(event.clips) == len(event.timeline)
    for cue, clip, span in zip(cues, event.clips, event.timeline, strict=True):
        assert cue.text == clip.text
        assert abs((cue.end_s - cue.start_s) - clip.duration_s) <= 0.010, (cue, clip)
        assert abs(cue.start_s - span.start_s) <= 0.010
    for left, right in zip(event.timeline, event.timeline[1:], strict=False):
        assert right.start_s == pytest.approx(left.end_s + 0.2, abs=0.002)  # gap_ms: 200


# --- tests --------------------------------------------------------------------------------


async def test_a_12_line_3_voice_job_becomes_exactly_one_event_with_subtitles_and_track(
        settings: Settings, voices: list[str], aggregator: Aggregator) -> None:
    aggregator.start()
    await aggregator.ready()
    script = _script("ep12", LINES, gap_ms=200, concat=True)
    put_manifest(make_store(settings.store), script)
    async with RunningWorker(settings):
        outcome = await run_job(settings, script, wait=True, timeout_s=240, job_timeout_s=60,
                                stream=sys.stderr)
    assert outcome is not None and not outcome.timed_out
    assert outcome.all_succeeded(12), {i: r.error for i, r in outcome.results.items()}
    event = outcome.job
    assert event is not None, aggregator.tail()
    assert event.status == "succeeded" and event.total == 12 and event.missing == []
    assert {c.voice_id for c in event.clips} == set(voices)
    _check_timeline_and_subtitles(settings, event)

    store = make_store(settings.store)
    assert event.track is not None and event.track.key == job_track_key("ep12", "wav")
    track = decode(store.get(event.track.key) or b"")
    assert abs(track.duration_s - event.timeline[-1].end_s) <= 0.010
    job_json = store.get(job_json_key("ep12"))
    assert job_json is not None and decode_job(job_json) == event

    await asyncio.sleep(3)  # a few timer ticks: nothing more may come out
    assert len(await _job_events(settings, "ep12")) == 1

    # The example downstream consumer reads the event and prints the assembly plan.
    plan = subprocess.run(
        [sys.executable, str(REPO / "docs/examples/video-factory/plan.py"), "--from-beginning",
         "--bootstrap", settings.kafka.bootstrap,
         "--topic", topic_names(settings.kafka.topic_prefix).jobs, "--job", "ep12"],
        capture_output=True, text=True, timeout=60, check=True).stdout
    rows = [line for line in plan.splitlines() if "s3://" in line and "audio/" in line]
    assert len(rows) == 12 and LINES[-1][2] in rows[-1]
    assert f"subtitles: {event.subtitles}" in plan and "track: s3://" in plan
    assert aggregator.stop() == 0, aggregator.tail()  # SIGTERM: clean exit


async def test_killed_mid_job_and_fed_duplicates_it_still_emits_one_event(
        settings: Settings, voices: list[str], tmp_path: Path) -> None:
    # A short timeout, so that a state lost in a restart would show up as a partial event.
    aggregator = Aggregator(settings, tmp_path, timeout_s=15)
    script = _script("ep13", LINES, gap_ms=200)
    put_manifest(make_store(settings.store), script)
    names = topic_names(settings.kafka.topic_prefix)
    first, second = script.requests[:6], script.requests[6:]
    aggregator.start()
    try:
        await aggregator.ready()
        async with RunningWorker(settings):
            await _produce(settings, names.requests,
                           [(r.voice_id.encode(), encode(r)) for r in first])
            deadline = time.monotonic() + 120
            while len(answered := await _results_for(settings, "ep13")) < 6:
                assert time.monotonic() < deadline, "the worker did not answer the first half"
                await asyncio.sleep(0.5)
            # Offsets committed past the first half: after the kill only the changelog
            # remembers clips 0-5 (they are not read from tts.results again).
            await _committed_at_least(settings, "ep13", 6)
            aggregator.kill()  # SIGKILL: no flush, no goodbye

            # Half of them delivered a second time while no aggregator runs.
            await _produce(settings, names.results, [(b"ep13", v) for v in answered[:3]])
            aggregator.start()
            await aggregator.ready()
            await _produce(settings, names.requests,
                           [(r.voice_id.encode(), encode(r)) for r in second])
            event = await _wait_for_job(settings, "ep13", 120, aggregator)

        assert event.status == "succeeded", aggregator.tail()
        assert len(event.clips) == 12 and len({c.request_id for c in event.clips}) == 12
        _check_timeline_and_subtitles(settings, event)

        # Killed right after the event, fed duplicates while down: the restarted one
        # recovers the emitted marker, so they do not open a new (partial) job.
        aggregator.kill()
        await _produce(settings, names.results, [(b"ep13", v) for v in answered[:2]])
        aggregator.start()
        await aggregator.ready()
        await asyncio.sleep(aggregator.timeout_s + 5)
        assert len(await _job_events(settings, "ep13")) == 1, aggregator.tail()
    finally:
        assert aggregator.stop() == 0, aggregator.tail()


async def test_a_job_whose_lines_stop_arriving_closes_as_partial(
        settings: Settings, tmp_path: Path) -> None:
    """No script and no worker: results produced by hand, texts only in metadata; /metrics
    counts what happened."""
    agg = Aggregator(settings, tmp_path, timeout_s=3, port=_free_port())
    agg.start()
    try:
        await agg.ready()
        results = [_fake_result("adhoc", i, total=3, text=f"line {i}") for i in (0, 2)]
        await _produce(settings, topic_names(settings.kafka.topic_prefix).results,
                       [(b"adhoc", encode(r)) for r in results])
        started = time.monotonic()
        event = await _wait_for_job(settings, "adhoc", 30, agg)
        assert time.monotonic() - started >= 2.5  # not before the timeout
        assert event.status == "partial" and event.missing == [1]
        assert [(c.index, c.text) for c in event.clips] == [(0, "line 0"), (2, "line 2")]
        srt = make_store(settings.store).get(job_subtitles_key("adhoc"))
        assert srt is not None
        assert [c.text for c in parse_srt(srt.decode())] == ["line 0", "line 2"]
        # the missing line turning up late does not reopen the job
        await _produce(settings, topic_names(settings.kafka.topic_prefix).results,
                       [(b"adhoc", encode(_fake_result("adhoc", 1, total=3)))])
        await asyncio.sleep(5)
        assert len(await _job_events(settings, "adhoc")) == 1

        metrics = await agg.scrape()
        outcomes = {o: metrics[("vf_job_results_total", (("outcome", o),))]
                   for o in ("merged", "late", "duplicate", "invalid")}
        assert outcomes == {"merged": 2, "late": 1, "duplicate": 0, "invalid": 0}, metrics
        assert metrics[("vf_jobs_emitted_total", (("status", "partial"),))] == 1
        assert metrics[("vf_jobs_emitted_total", (("status", "succeeded"),))] == 0
        assert metrics[("vf_job_timeouts_total", ())] == 1
        assert metrics[("vf_job_emit_seconds_count", ())] == 0  # timed out: no latency
        assert metrics[("vf_jobs_open", ())] == 0 and metrics[("vf_job_markers", ())] == 1
        assert metrics[("vf_aggregator_partitions", ())] == 12
    finally:
        assert agg.stop() == 0, agg.tail()


async def test_the_outbox_note_stops_a_second_produce_after_a_crash(
        settings: Settings) -> None:
    """The crash window between the broker's ack and the table's emitted mark: a fresh
    emitter (a restarted process) finds the event on the topic and does not produce it."""
    state = _complete_state("crash", 2)
    names = topic_names(settings.kafka.topic_prefix)
    store = make_store(settings.store)
    first = JobEmitter(settings=settings, store=store, producer=make_producer(settings.kafka),
                       jobs_topic=names.jobs)
    await first.start()
    try:
        event, produced = await first.emit(state)
    finally:
        await first.stop()
    assert produced
    again = JobEmitter(settings=settings, store=store, producer=make_producer(settings.kafka),
                       jobs_topic=names.jobs)
    await again.start()
    try:
        replay, produced_again = await again.emit(state)
        assert not produced_again and replay == event
        # A note without an event (crash after job.json, before the produce): produce it.
        other = _complete_state("crash-2", 1)
        info_partition, end = await _jobs_end(settings, "crash-2")
        store.put(job_json_key("crash-2"), b"{}", "application/json",
                  {OUTBOX_PARTITION: str(info_partition), OUTBOX_OFFSET: str(end)})
        _, produced_other = await again.emit(other)
        assert produced_other
    finally:
        await again.stop()
    assert len(await _job_events(settings, "crash")) == 1
    assert len(await _job_events(settings, "crash-2")) == 1


async def test_a_job_too_long_for_one_record_goes_out_by_reference_to_its_job_json(
        settings: Settings) -> None:
    """2,000 lines with their links weigh about 1.4 MB, over the 1 MiB a record may: the
    event goes out without clips and timeline, naming job.json, which holds them all (the
    record the broker refused used to be retried every tick, and the job never closed)."""
    import urllib.request

    state = _complete_state("long-episode", 2000, url="http://127.0.0.1:9000/" + "s" * 500)
    names = topic_names(settings.kafka.topic_prefix)
    store = make_store(settings.store)
    emitter = JobEmitter(settings=settings, store=store, producer=make_producer(settings.kafka),
                         jobs_topic=names.jobs)
    await emitter.start()
    try:
        whole, produced = await asyncio.wait_for(emitter.emit(state), 60)
    finally:
        await emitter.stop()
    assert produced and len(whole.clips) == 2000 and whole.status == "succeeded"
    [event] = await _job_events(settings, "long-episode")
    assert event.omitted == ["clips", "timeline"] and event.clips == [] == event.timeline
    assert event.total == 2000 and event.status == "succeeded" and event.subtitles_url
    assert event.job_json == f"s3://{store.bucket}/{job_json_key('long-episode')}"
    assert event.job_json_url is not None

    def fetch(url: str) -> bytes:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return bytes(reply.read())

    stored = decode_job(await asyncio.to_thread(fetch, event.job_json_url))
    assert [c.index for c in stored.clips] == list(range(2000)) and stored.omitted == []
    assert len(stored.timeline) == 2000 and stored.duration_s == event.duration_s


# --- fixtures' helpers --------------------------------------------------------------------


def _fake_result(job_id: str, index: int, total: int, text: str | None = None,
                 url: str = "http://x") -> SynthesisResult:
    rid = f"{job_id}-{index:04d}"
    return SynthesisResult(
        request_id=rid, voice_id="v", status="succeeded", completed_at="2031-01-01T00:00:00Z",
        audio=AudioRef(bucket="b", key=f"audio/2031/01/01/{rid}.wav", url=url,
                       format="wav", sample_rate=22050, duration_s=1.0 + index / 4,
                       bytes=1, sha256="0" * 64),
        job=JobRef(id=job_id, index=index, total=total),
        metadata={"text": text} if text else None)


def _complete_state(job_id: str, total: int, url: str = "http://x") -> JobState:
    state: JobState | None = None
    for i in range(total):
        state = merge(state, _fake_result(job_id, i, total, text=f"t{i}", url=url), time.time())
    assert state is not None and state.complete
    return state


async def _jobs_end(settings: Settings, job_id: str) -> tuple[int, int]:
    from topics.partitioning import partition_for
    from topics.specs import JOBS

    partition = partition_for(job_id, JOBS.partitions)
    consumer = make_consumer(settings.kafka, enable_auto_commit=False, group_id=None)
    await consumer.start()
    try:
        tp = TopicPartition(topic_names(settings.kafka.topic_prefix).jobs, partition)
        return partition, int((await consumer.end_offsets([tp]))[tp])
    finally:
        await consumer.stop()


async def _committed_at_least(settings: Settings, job_id: str, offset: int,
                              timeout_s: float = 60) -> None:
    """Until the aggregator's group has committed `offset` on the job's results partition."""
    from consumers.aggregator.app import app_id
    from topics.partitioning import partition_for
    from topics.specs import RESULTS

    tp = TopicPartition(topic_names(settings.kafka.topic_prefix).results,
                        partition_for(job_id, RESULTS.partitions))
    consumer = make_consumer(settings.kafka, enable_auto_commit=False, group_id=app_id(settings))
    await consumer.start()
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if (await consumer.committed(tp) or 0) >= offset:
                return
            await asyncio.sleep(0.3)
        raise AssertionError(f"{app_id(settings)} never committed {offset} on {tp}")
    finally:
        await consumer.stop()


# --- revisions, consumed as an outsider would ----------------------------------------------


SCHEMAS = REPO / "topics" / "schemas"


def _outsider_decode(values: list[bytes], schema: str) -> list[dict[str, Any]]:
    """What a consumer in another language does: plain JSON, checked against the published
    schema file only (no project types)."""
    import json

    import jsonschema

    checker = jsonschema.Draft202012Validator(
        json.loads((SCHEMAS / f"{schema}.json").read_text("utf-8")),
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    out = []
    for value in values:
        doc = json.loads(value)
        checker.validate(doc)
        out.append(doc)
    return out


def _http_get(url: str) -> str:
    """A presigned URL fetched with no S3 credentials at all."""
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as response:  # our own store
        return str(response.read().decode("utf-8"))


_COLOURS = ("red", "blue", "green", "grey", "gold", "pink", "black", "white", "brown", "teal")
_ANIMALS = ("fox", "owl", "cat", "crow", "wolf")


@pytest.mark.parametrize(("n", "bad"), [
    (10, (6,)),
    (50, (7, 31)),  # the figure: 50 lines, 2 bad (about 30 s more than 10 here)
])
async def test_a_revision_re_synthesizes_only_the_fixed_lines_and_emits_version_2(
        settings: Settings, voices: list[str], aggregator: Aggregator, n: int,
        bad: tuple[int, ...]) -> None:
    from consumers.clients.jobs import submit

    job_id = f"rev{n}"  # the session's bucket is shared by the parameters

    # Texts without digits, so the engine sees them as written (numbers are read out).
    lines = [(("narrator", "li", "sam")[i % 3], "en",
              f"The {_COLOURS[i % 10]} {_ANIMALS[i // 10]} says its line.") for i in range(n)]
    # The worker rejects this language (no espeak-ng voice); job run's checks let it pass.
    broken = [(v, "tlh" if i in bad else lang, t) for i, (v, lang, t) in enumerate(lines)]
    store = make_store(settings.store)
    aggregator.start()
    await aggregator.ready()
    synthesized: list[str] = []
    async with RunningWorker(settings) as running:
        engine = running.runtime.engine
        real = engine.synthesize

        def counting(profile: Any, batch: list[Any]) -> Any:
            synthesized.extend(item.text for item in batch)
            return real(profile, batch)

        engine.synthesize = counting  # type: ignore[method-assign]
        first = submit(store, _script(job_id, broken, gap_ms=150))
        assert first.version == 1 and len(first.requests) == n
        out1 = await run_job(settings, first.script, wait=True, timeout_s=240,
                             job_timeout_s=60, stream=sys.stderr)
        assert out1 is not None and out1.job is not None, aggregator.tail()
        assert sorted(i for i, r in out1.results.items() if r.status != "succeeded") == list(bad)
        assert all(out1.results[i].status == "rejected" for i in bad)

        synthesized.clear()
        second = submit(store, _script(job_id, lines, gap_ms=150))
        assert (second.version, second.reasons) == (2, dict.fromkeys(bad, "changed"))
        started = time.monotonic()
        out2 = await run_job(settings, second.script, wait=True, timeout_s=240,
                             job_timeout_s=60, stream=sys.stderr)
        assert out2 is not None and out2.job is not None, aggregator.tail()
        print(f"{n} lines, {len(bad)} fixed: version 2 event "
              f"{time.monotonic() - started:.2f} s after its requests were produced",
              file=sys.stderr)
        # The engine saw, in all of version 2, exactly the fixed lines' texts.
        assert sorted(synthesized) == sorted(lines[i][2] for i in bad)

        again = submit(store, _script(job_id, lines, gap_ms=150))
        assert again.unchanged and again.requests == []

    names = topic_names(settings.kafka.topic_prefix)
    jobs = [j for j in _outsider_decode(await _read_all(settings, names.jobs), "tts.job.v1")
            if j["job_id"] == job_id]
    results = [r for r in _outsider_decode(await _read_all(settings, names.results),
                                           "tts.result.v1")
               if isinstance(r.get("job"), dict) and r["job"]["id"] == job_id]
    assert [j["version"] for j in jobs] == [1, 2]  # exactly one event per version
    v1, v2 = jobs
    by_version: dict[int, set[str]] = {}
    for r in results:
        job = r["job"]
        assert isinstance(job, dict)
        by_version.setdefault(job.get("version", 1), set()).add(str(r["request_id"]))
    assert by_version == {1: {f"{job_id}-{i:04d}" for i in range(n)},
                          2: {f"{job_id}-v2-{i:04d}" for i in bad}}

    # Version 1: partial from a rejected line, nothing missing; version 2: complete.
    assert (v1["status"], v1.get("missing", [])) == ("partial", [])  # left out when empty
    assert [s["index"] for s in v1["timeline"]] == [i for i in range(n) if i not in bad]
    assert (v2["status"], v2.get("missing", []), v2["gap_ms"]) == ("succeeded", [], 150)
    clips = v2["clips"]
    timeline = v2["timeline"]
    assert isinstance(clips, list) and isinstance(timeline, list)
    assert [c["index"] for c in clips] == [s["index"] for s in timeline] == list(range(n))
    assert [c["version"] for c in clips] == [2 if i in bad else 1 for i in range(n)]
    v1_clips = {c["index"]: c for c in v1["clips"]}
    for c in clips:
        if c["index"] not in bad:  # carried: the very same object as in version 1
            assert c["request_id"] == v1_clips[c["index"]]["request_id"]
            assert c["audio"]["key"] == v1_clips[c["index"]]["audio"]["key"]
    for left, right in itertools.pairwise(timeline):
        assert right["start_s"] == pytest.approx(left["end_s"] + 0.15, abs=0.002)

    # The subtitles, fetched as an outsider would: by presigned URL, no credentials.
    srt = parse_srt(_http_get(str(v2["subtitles_url"])))
    assert [c.text for c in srt] == [t for _, _, t in lines]
    for cue, span in zip(srt, timeline, strict=True):
        assert abs(cue.start_s - span["start_s"]) <= 0.002
        assert abs(cue.end_s - span["end_s"]) <= 0.002
    vtt = _http_get(str(v2["subtitles_vtt_url"]))
    assert vtt.startswith("WEBVTT") and len(parse_srt(vtt)) == n
    assert str(v2["subtitles"]).endswith(f"jobs/{job_id}/v2/subtitles.srt")

    # Version 1's event and files are as they were.
    import json

    assert json.loads(store.get(job_json_key(job_id)) or b"") == v1
    assert len(parse_srt((store.get(job_subtitles_key(job_id)) or b"").decode())) == \
        n - len(bad)

    # The example downstream consumer, asked for version 2, marks what it can keep.
    plan = subprocess.run(
        [sys.executable, str(REPO / "docs/examples/video-factory/plan.py"), "--from-beginning",
         "--bootstrap", settings.kafka.bootstrap, "--topic", names.jobs, "--job", job_id,
         "--version", "2"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert f"job {job_id} v2: succeeded, {n}/{n} clips" in plan
    assert plan.count("(as in v1)") == n - len(bad)
    assert aggregator.stop() == 0, aggregator.tail()
