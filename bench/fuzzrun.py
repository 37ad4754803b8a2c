"""The fuzz suite's plumbing: plan, producer, answer reader, log tap and report.

    FuzzPlan (VF_FUZZ_* or the bench's sizes) -> bench.fuzzgen records
        --FuzzProducer.send--> the topic, one record at a time, acks=all; the producer's
          max_request_size is raised so that records over the topic's max.message.bytes reach
          the broker, which must refuse them (MessageSizeTooLargeError)
    tts.results, tts.dlq, tts.jobs --AnswerLog (from the beginning, in the background)-->
        answers by request ID, dead letters by original (topic, partition, offset), job events
    logging --LogTap--> warnings by message template, with their time (retry loops)
    what the checks found --> FuzzReport: flat figures + the properties that failed

The runs themselves (a worker in this process, the aggregator in a process of its own) and
their checks are in bench/fuzzcheck.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from bench.fuzzgen import FEATURES, FuzzRecord
from consumers.kafka import make_consumer, security_kwargs
from consumers.settings import KafkaSettings, Settings
from topics.admin import admin_client, describe_topics
from topics.events import (
    DeadLetter,
    JobCompleted,
    SynthesisResult,
    decode_job,
    decode_result,
)
from topics.specs import REQUESTS

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 1_048_588  # Kafka's message.max.bytes default, when the topic says nothing


@dataclass(frozen=True)
class FuzzPlan:
    examples: int = 40  # drawn records per topic, besides the fixed edge cases
    seed: int = 0
    answer_bound_s: float = 30.0  # each record answered within this after its produce
    wait_s: float = 60.0  # for all answers after the last produce, and again for commits
    exclude: tuple[str, ...] = ()  # bench.fuzzgen.FEATURES left out

    @classmethod
    def from_env(cls, *, examples: int, environ: Mapping[str, str] | None = None) -> FuzzPlan:
        """VF_FUZZ_EXAMPLES, VF_FUZZ_SEED (default: random, reported), VF_FUZZ_WAIT_S,
        VF_FUZZ_ANSWER_BOUND_S and VF_FUZZ_EXCLUDE (comma-separated features)."""
        env = os.environ if environ is None else environ
        exclude = tuple(f for f in env.get("VF_FUZZ_EXCLUDE", "").replace(" ", "").split(",")
                        if f)
        unknown = set(exclude) - set(FEATURES)
        if unknown:
            raise ValueError(f"VF_FUZZ_EXCLUDE: unknown {sorted(unknown)}; known: {FEATURES}")
        return cls(examples=int(env.get("VF_FUZZ_EXAMPLES") or examples),
                   seed=int(env.get("VF_FUZZ_SEED") or random.randrange(2**31)),  # noqa: S311
                   wait_s=float(env.get("VF_FUZZ_WAIT_S") or cls.wait_s),
                   answer_bound_s=float(env.get("VF_FUZZ_ANSWER_BOUND_S")
                                        or cls.answer_bound_s),
                   exclude=exclude)

    def describe(self) -> str:
        return (f"{self.examples} examples a topic, seed {self.seed} (VF_FUZZ_SEED to replay)"
                + (f", excluding {', '.join(self.exclude)}" if self.exclude else ""))


@dataclass
class Sent:
    """One record as produced: where it landed, or why the broker refused it."""

    record: FuzzRecord
    topic: str
    sent_at: float  # time.monotonic() before the send
    partition: int | None = None
    offset: int | None = None
    refused: str | None = None  # the error's class name and message
    refused_by_broker: bool = False  # False: the client refused before sending
    request_id: str | None = None  # request lanes: the ID its answer must carry (None: DLQ)

    @property
    def where(self) -> tuple[str, int, int] | None:
        if self.partition is None or self.offset is None:
            return None
        return (self.topic, self.partition, self.offset)

    def describe(self) -> str:
        r = self.record
        at = f"{self.topic}[{self.partition}]@{self.offset}" if self.where else self.topic
        return (f"{r.shape} ({r.size:,} bytes, key {len(r.key) if r.key else None}, "
                f"{len(r.headers)} headers, request_id {self.request_id}) at {at}")


class FuzzProducer:
    """Sends records one at a time and says where each landed, or why it did not."""

    def __init__(self, kafka: KafkaSettings, limit: int) -> None:
        # Plain (not idempotent): a refused batch must not disturb later sequence numbers.
        self._producer = AIOKafkaProducer(
            bootstrap_servers=kafka.bootstrap, acks="all", client_id="voicefactory-fuzz",
            max_request_size=4 * limit, max_batch_size=2 * limit, request_timeout_ms=30_000,
            **security_kwargs(kafka))

    async def __aenter__(self) -> FuzzProducer:
        await self._producer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._producer.stop()

    async def send(self, topic: str, record: FuzzRecord) -> Sent:
        sent = Sent(record=record, topic=topic, sent_at=time.monotonic())
        try:  # the client's own checks raise here, the broker's answer through the future
            future = await self._producer.send(
                topic, record.value, key=record.key, headers=record.headers,
                partition=record.partition, timestamp_ms=record.timestamp_ms)
        except KafkaError as exc:
            sent.refused = f"{type(exc).__name__}: {exc}"
            return sent
        try:
            meta = await future
        except KafkaError as exc:
            sent.refused, sent.refused_by_broker = f"{type(exc).__name__}: {exc}", True
            return sent
        sent.partition, sent.offset = meta.partition, meta.offset
        return sent


class AnswerLog:
    """Every record of `topics` from the beginning, decoded by kind, with its arrival time."""

    def __init__(self, settings: Settings, *, results: str | None = None,
                 dlq: str | None = None, jobs: str | None = None) -> None:
        self._settings = settings
        self._kinds = {t: k for k, t in (("results", results), ("dlq", dlq), ("jobs", jobs))
                       if t is not None}
        self.results: dict[str, list[tuple[float, SynthesisResult]]] = defaultdict(list)
        self.dlq: dict[tuple[str, int, int], list[tuple[float, DeadLetter]]] = defaultdict(list)
        self.jobs: dict[str, list[tuple[float, JobCompleted]]] = defaultdict(list)
        self.unreadable: list[str] = []  # answers that do not decode (a bug of ours)
        self._consumer: Any = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> AnswerLog:
        consumer = make_consumer(self._settings.kafka, group_id=None, enable_auto_commit=False,
                                 auto_offset_reset="earliest",
                                 max_partition_fetch_bytes=8 * 2**20)
        await consumer.start()
        self._consumer = consumer
        tps = []
        for topic in self._kinds:
            await consumer._client.force_metadata_update()
            tps += [TopicPartition(topic, p) for p in sorted(
                consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        self._task = asyncio.create_task(self._read(), name="fuzz-answers")
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
                batches = await self._consumer.getmany(timeout_ms=200)
            except KafkaError as exc:
                log.warning("fuzz answer reader: %s", exc)
                await asyncio.sleep(0.5)
                continue
            now = time.monotonic()
            for tp, records in batches.items():
                for rec in records:
                    self._take(self._kinds[tp.topic], rec.value or b"", now)

    def _take(self, kind: str, value: bytes, now: float) -> None:
        try:
            if kind == "results":
                result = decode_result(value)
                self.results[result.request_id].append((now, result))
            elif kind == "dlq":
                letter = msgspec.json.decode(value, type=DeadLetter)
                self.dlq[(letter.topic, letter.partition, letter.offset)].append((now, letter))
            else:
                job = decode_job(value)
                self.jobs[job.job_id].append((now, job))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            self.unreadable.append(f"{kind}: {exc}")


class LogTap(logging.Handler):
    """Warnings and errors of the project's loggers in this process, by template and time."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[tuple[float, str, str]] = []  # (time, level, message template)

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((time.monotonic(), record.levelname, str(record.msg)))

    @contextlib.contextmanager
    def attached(self, names: Sequence[str] = ("consumers", "pipeline")) -> Iterator[None]:
        loggers = [logging.getLogger(n) for n in names]
        for logger in loggers:
            logger.addHandler(self)
        try:
            yield
        finally:
            for logger in loggers:
                logger.removeHandler(self)

    def since(self, t: float, needle: str) -> int:
        return sum(1 for at, _, msg in self.seen if at >= t and needle in msg)

    def errors(self) -> list[str]:
        return [msg for _, level, msg in self.seen if level in ("ERROR", "CRITICAL")]


@dataclass
class FuzzReport:
    """What one run measured (flat figures for the bench) and the properties that failed."""

    name: str
    plan: FuzzPlan
    figures: dict[str, float | int | None] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        self.failures.append(message)

    def describe(self, most: int = 25) -> str:
        lines = [f"fuzz {self.name}: {self.plan.describe()}",
                 "  " + ", ".join(f"{k}={v}" for k, v in self.figures.items())]
        lines += [f"  note: {n}" for n in self.notes]
        if self.failures:
            lines.append(f"  {len(self.failures)} properties failed:")
            lines += [f"  - {f}" for f in self.failures[:most]]
            if len(self.failures) > most:
                lines.append(f"  ... and {len(self.failures) - most} more")
        return "\n".join(lines)


async def topic_limit(kafka: KafkaSettings, prefix: str) -> int:
    """The request topic's max.message.bytes (the broker's message.max.bytes unless set)."""
    admin = admin_client(kafka.bootstrap, **security_kwargs(kafka))
    await admin.start()
    try:
        states = await describe_topics(admin, prefix=prefix, specs=(REQUESTS,))
    finally:
        await admin.close()
    return int(states[0].configs.get("max.message.bytes") or DEFAULT_LIMIT)


async def group_lag(kafka: KafkaSettings, group: str,
                    topics: Sequence[str]) -> dict[TopicPartition, tuple[int, int]]:
    """Per partition of `topics`: (committed offset of `group`, end offset); only those whose
    committed offset is short of the end."""
    admin = admin_client(kafka.bootstrap, **security_kwargs(kafka))
    consumer = make_consumer(kafka, group_id=None, enable_auto_commit=False)
    await admin.start()
    await consumer.start()
    try:
        tps = []
        for topic in topics:
            tps += [TopicPartition(topic, p) for p in sorted(
                await _partitions(consumer, topic))]
        ends = await consumer.end_offsets(tps)
        committed = await admin.list_consumer_group_offsets(group, partitions=tps)
        behind = {}
        for tp in tps:
            meta = committed.get(tp)
            done = meta.offset if meta is not None and meta.offset >= 0 else 0
            if done < ends[tp]:
                behind[tp] = (done, int(ends[tp]))
        return behind
    finally:
        await consumer.stop()
        await admin.close()


async def wait_committed(kafka: KafkaSettings, group: str, topics: Sequence[str],
                         timeout_s: float) -> dict[TopicPartition, tuple[int, int]]:
    """group_lag until it is empty or `timeout_s` ran out; what was still behind."""
    deadline = time.monotonic() + timeout_s
    while True:
        behind = await group_lag(kafka, group, topics)
        if not behind or time.monotonic() >= deadline:
            return behind
        await asyncio.sleep(0.5)


async def _partitions(consumer: Any, topic: str) -> set[int]:
    found: set[int] = consumer.partitions_for_topic(topic) or set()
    if not found:
        await consumer._client.force_metadata_update()
        found = consumer.partitions_for_topic(topic) or set()
    return found


async def until(condition: Callable[[], bool], timeout_s: float, poll_s: float = 0.3) -> bool:
    """Poll `condition` until it holds (True) or `timeout_s` ran out (False)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(poll_s)
    return True


def http_status(port: int, path: str) -> int:
    """GET 127.0.0.1:port/path: the status code (0 when nothing answered)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def check_refusals(report: FuzzReport, sent: Sequence[Sent]) -> None:
    """Records over the limit (and keyless ones on a compacted topic) refused by the broker
    itself, not by the client; nothing else refused."""
    for s in sent:
        why = s.record.must_refuse
        if why is not None and not (s.refused_by_broker and why in (s.refused or "")):
            report.fail(f"the broker took (or the client refused) a record it must refuse "
                        f"({why}): {s.describe()}: {s.refused or 'accepted'}")
        elif why is None and s.refused is not None:
            report.fail(f"a record the broker must take was refused: {s.describe()}: "
                        f"{s.refused}")
