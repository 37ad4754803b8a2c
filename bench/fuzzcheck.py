"""The fuzz suite against a synthesis worker: generated records on every topic it reads.

    a worker in this process (`voicefactory worker`'s objects, bench engine, fuzz_settings)
    -> tts.control garbage -> tts.voices garbage -> both request lanes: bench.fuzzgen's
    records with a valid sentinel request after every SENTINEL_EVERY of them, one sentinel
    per partition and lane after all of them, one request ID with two texts, then a cancel
    (its reason just under the broker's limit) and the request it names
    -> wait until every record is answered, then until the group's committed offsets reach
    the end of every partition of both lanes -> checks:
      - the worker task and every loop of it alive, /healthz and /readyz 200
      - each record answered once and within the bound: a result with its request ID when
        it names one (a `failed` result may come with its DLQ record), else a DLQ record
        with its topic, partition and offset
      - sentinels `succeeded`; the named request `cancelled` (the control reader survived
        the garbage); the reused ID's second text `rejected`
      - voices in the store and the profile cache: only the registered one (tts.voices has
        no reader in the worker; its registry is each voice's voice.json in the store)
      - refusals as the broker must make them; no publish retry still going at the end
The aggregator's run is in bench/fuzzagg.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from typing import Any

import orjson

from bench.fuzzgen import (
    KINDS,
    LANES,
    FuzzRecord,
    Ids,
    TopicKind,
    drafts,
    expected_request_id,
    render,
)
from bench.fuzzrun import (
    AnswerLog,
    FuzzPlan,
    FuzzProducer,
    FuzzReport,
    LogTap,
    Sent,
    check_refusals,
    http_status,
    topic_limit,
    until,
    wait_committed,
)
from bench.processes import InProcessWorker
from consumers.settings import Settings
from pipeline.storage import ObjectStore
from pipeline.voices import list_voices
from topics.events import SynthesisRequest, encode
from topics.specs import REQUESTS, topic_names

SENTINEL_EVERY = 8
LOOPS = ("fetch", "commit", "control", "fleet")  # SynthesisWorker's task names (dispatch-N too)
RETRIES = ("publishing the ",)  # consumers/worker/errors.py deliver(): a retry that may never end


def fuzz_settings(settings: Settings) -> Settings:
    """The worker the suite runs: bench engine, no quality checks (speaker similarity of a
    long clip costs seconds of CPU), a short drain, the health server on a free port."""
    return settings.with_overrides(
        engine={"name": "bench"},
        worker={"quality_checks": "off", "drain_seconds": 5, "metrics_port": 0,
                "metrics_host": "127.0.0.1", "max_attempts": 3})


def records(kind: TopicKind, plan: FuzzPlan, ids: Ids, voice: str,
             limit: int) -> list[FuzzRecord]:
    return [render(d, kind, ids=ids, voice=voice, limit=limit)
            for d in drafts(kind, plan.examples, plan.seed, plan.exclude)]


def _sentinel(kind: TopicKind, rid: str, voice: str, partition: int | None,
              text: str = "A sentinel line.") -> FuzzRecord:
    request = SynthesisRequest(request_id=rid, voice_id=voice, text=text, language="en")
    return FuzzRecord(kind=kind, shape="sentinel", key=voice.encode(), value=encode(request),
                      partition=partition)


async def wait_ready(worker: InProcessWorker, timeout_s: float = 90) -> int:
    """Until the started worker's /readyz answers 200; its health server's port."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        health = worker.worker.health
        if worker.task is not None and worker.task.done():
            worker.task.result()  # raises what it died of
        if health is not None and health.port and await asyncio.to_thread(
                http_status, health.port, "/readyz") == 200:
            return health.port
        await asyncio.sleep(0.3)
    raise TimeoutError(f"worker not ready in {timeout_s:.0f} s")


class WorkerRun:
    """One fuzz run against one in-process worker; `run()` returns the report."""

    def __init__(self, settings: Settings, *, voice: str, plan: FuzzPlan,
                 store: ObjectStore) -> None:
        self.s, self.voice, self.plan, self.store = settings, voice, plan, store
        self.names = topic_names(settings.kafka.topic_prefix)
        self.lanes: dict[TopicKind, str] = {"requests": self.names.requests,
                                            "interactive": self.names.requests_interactive}
        self.ids = Ids()
        self.report = FuzzReport("worker", plan)
        self.sent: list[Sent] = []
        self.sentinels: set[str] = set()
        self.cancelled_rid = ""
        self.reused = ""
        self.tap = LogTap()
        self.died = False  # the worker task ended before the checks

    async def run(self) -> FuzzReport:
        started = time.monotonic()
        limit = await topic_limit(self.s.kafka, self.s.kafka.topic_prefix)
        voices_before = sorted(v.voice_id for v in list_voices(self.store))
        worker = InProcessWorker(self.s)
        with self.tap.attached():
            worker.start()
            try:
                port = await wait_ready(worker)
                async with AnswerLog(self.s, results=self.names.results,
                                     dlq=self.names.dlq) as answers:
                    async with FuzzProducer(self.s.kafka, limit) as producer:
                        await self._produce(producer, worker, limit)
                    produced_at = time.monotonic()
                    await self._wait_answers(answers)
                    behind = await wait_committed(self.s.kafka, self.s.worker.group_id,
                                                  list(self.lanes.values()), self.plan.wait_s)
                    await asyncio.sleep(2.0)  # room for a late duplicate or a retry
                    quiet_from = time.monotonic() - 2.0
                    await self._check_alive(worker, port)
                    self._check_answers(answers)
            finally:
                stopped = await self._stop(worker)
        r = self.report
        for tp, (done, end) in sorted(behind.items()):
            r.fail(f"committed offset of {tp.topic}[{tp.partition}] is {done}, end {end}")
        retrying = sum(self.tap.since(quiet_from, needle) for needle in RETRIES)
        if retrying:
            r.fail(f"{retrying} publish retries in the last 2 s: an answer that never goes")
        if not stopped:
            r.fail("the worker did not stop within 30 s of stop()")
        voices_after = sorted(v.voice_id for v in list_voices(self.store))
        if voices_after != voices_before:
            r.fail(f"voices in the store changed: {voices_before} -> {voices_after}")
        hot = set(worker.worker._hot_voices())
        if not hot <= {self.voice}:
            r.fail(f"profile cache holds voices nobody registered: {sorted(hot)}")
        check_refusals(r, self.sent)
        partitions = REQUESTS.partitions * len(self.lanes)
        r.figures.update({
            "fuzz_seconds": round(time.monotonic() - started, 1),
            "fuzz_produce_s": round(produced_at - started, 1),
            "fuzz_workers_restarted": int(self.died),
            "fuzz_partitions_at_end": partitions - len(behind),
            "fuzz_partitions": partitions,
            "fuzz_errors_logged": len(self.tap.errors())})
        return r

    async def _stop(self, worker: InProcessWorker) -> bool:
        try:
            await worker.stop(timeout_s=30)
        except TimeoutError:
            if worker.task is not None:
                worker.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await worker.task
            return False
        except Exception as exc:  # what the run died of: a property failure, not a crash here
            self.report.fail(f"worker.run() ended with {exc!r}")
        return True

    async def _produce(self, producer: FuzzProducer, worker: InProcessWorker,
                       limit: int) -> None:
        readers: tuple[tuple[TopicKind, str], ...] = (("control", self.names.control),
                                                      ("voices", self.names.voices))
        for kind, topic in readers:
            for rec in records(kind, self.plan, self.ids, self.voice, limit):
                self.sent.append(await producer.send(topic, rec))
        n = 0
        for kind, topic in self.lanes.items():
            for i, rec in enumerate(records(kind, self.plan, self.ids, self.voice, limit)):
                await self._lane_send(producer, topic, rec)
                if i % SENTINEL_EVERY == SENTINEL_EVERY - 1:
                    n += 1
                    await self._sentinel(producer, kind, topic, n % REQUESTS.partitions)
            for p in range(REQUESTS.partitions):  # each partition past its garbage
                await self._sentinel(producer, kind, topic, p)
        if "reused_id" not in self.plan.exclude:  # one ID, two texts: the second rejected
            reused = self.reused = self.ids.request()
            for text in ("The first text.", "A different second text."):
                await self._lane_send(producer, self.names.requests,
                                      _sentinel("requests", reused, self.voice, None, text))
        await self._cancel_then_request(producer, worker, limit)

    async def _lane_send(self, producer: FuzzProducer, topic: str, rec: FuzzRecord) -> Sent:
        sent = await producer.send(topic, rec)
        sent.request_id = expected_request_id(rec.value)
        self.sent.append(sent)
        return sent

    async def _sentinel(self, producer: FuzzProducer, kind: TopicKind, topic: str,
                        partition: int) -> None:
        rid = self.ids.request()
        self.sentinels.add(rid)
        await self._lane_send(producer, topic, _sentinel(kind, rid, self.voice, partition))

    async def _cancel_then_request(self, producer: FuzzProducer, worker: InProcessWorker,
                                   limit: int) -> None:
        """A cancel after the control garbage (its reason just under the limit, echoed in the
        `cancelled` result), then the request it names: the reader must still apply it."""
        rid = self.cancelled_rid = self.ids.request()
        reason = "x" * (limit - 1024) if "near_limit" not in self.plan.exclude else "fuzz"
        command = {"schema": "tts.control.v1", "action": "cancel", "request_id": rid,
                   "reason": reason}
        self.sent.append(await producer.send(self.names.control, FuzzRecord(
            kind="control", shape="cancel_sentinel", key=rid.encode(),
            value=orjson.dumps(command))))
        if not await until(lambda: worker.worker.cancels.is_cancelled(rid), 30, 0.1):
            self.report.fail("the control reader did not apply a valid cancel within 30 s")
        await self._lane_send(producer, self.names.requests,
                              _sentinel("requests", rid, self.voice, None))

    def _lane_sent(self) -> list[Sent]:
        return [s for s in self.sent if s.record.kind in LANES and s.where is not None]

    async def _wait_answers(self, answers: AnswerLog) -> None:
        lane = self._lane_sent()
        await until(lambda: all(_answers_of(s, answers)[0] for s in lane), self.plan.wait_s,
                    0.5)

    async def _check_alive(self, worker: InProcessWorker, port: int) -> None:
        r = self.report
        if worker.task is None or worker.task.done():
            self.died = True
            r.fail("the worker task ended during the run")
        alive = {t.get_name() for t in asyncio.all_tasks() if not t.done()}
        wanted = {*LOOPS, *(f"dispatch-{i}" for i in range(len(worker.worker.shape.dispatchers)))}
        if wanted - alive:
            r.fail(f"worker loops died: {sorted(wanted - alive)}")
        r.figures["fuzz_loops_alive"] = len(wanted & alive)
        for path in ("/healthz", "/readyz"):
            status = await asyncio.to_thread(http_status, port, path)
            if status != 200:
                r.fail(f"{path} answered {status}")

    def _check_answers(self, answers: AnswerLog) -> None:
        lane = self._lane_sent()
        shared = Counter(s.request_id for s in lane if s.request_id is not None)
        waits: dict[str, list[float]] = {k: [] for k in LANES}
        counts: dict[str, Counter[str]] = {k: Counter() for k in LANES}
        for s in lane:  # every record is checked; the figures count the generated ones
            generated = s.record.shape != "sentinel"
            c = counts[s.record.kind] if generated else Counter()
            named = shared[s.request_id] if s.request_id is not None else 0
            wait = self._check_record(s, answers, named, c)
            if wait is not None and generated:
                waits[s.record.kind].append(wait)
        self._check_named(answers, shared)
        if answers.unreadable:
            self.report.fail(f"{len(answers.unreadable)} answers do not decode: "
                             f"{answers.unreadable[:3]}")
        self._figures(answers, counts, waits)

    def _check_record(self, s: Sent, answers: AnswerLog, named: int,
                      c: Counter[str]) -> float | None:
        """One lane record answered once, in time; the wait, None when never answered.
        `named`: how many records carry its request ID (more than one: a reused ID)."""
        r = self.report
        at, results, letters = _answers_of(s, answers)
        if at is None:
            c["unanswered"] += 1
            r.fail(f"never answered: {s.describe()}")
            return None
        c["answered"] += 1
        c["dlq"] += bool(letters)
        c["results"] += bool(results)
        c["failed"] += bool(results and letters)
        if at - s.sent_at > self.plan.answer_bound_s:
            r.fail(f"answered after {at - s.sent_at:.1f} s: {s.describe()}")
        if len(results) > max(named, 1) or len(letters) > 1:
            c["duplicates"] += 1
            r.fail(f"answered {len(results)} + {len(letters)} times: {s.describe()}")
        elif letters and results and named == 1 and any(
                res.status != "failed" for _, res in results):
            c["duplicates"] += 1
            r.fail(f"a DLQ record beside a {results[0][1].status} result: {s.describe()}")
        return at - s.sent_at

    def _check_named(self, answers: AnswerLog, shared: Counter[str]) -> None:
        """Reused IDs (one answer each), sentinels succeeded, the cancelled one cancelled."""
        r = self.report

        def statuses(rid: str) -> list[str]:
            return [res.status for _, res in answers.results.get(rid, [])]

        for rid, n in sorted((k, v) for k, v in shared.items() if v > 1):
            got = statuses(rid)
            r.notes.append(f"{n} records of request ID {rid} answered {', '.join(got)}")
            if len(got) < n:
                r.fail(f"{n} records named {rid}, {len(got)} answered")
            if rid == self.reused and sorted(got) != ["rejected", "succeeded"]:
                r.fail(f"one request ID, two texts: answered {got}, not the first succeeded "
                       "and the second rejected")
        for rid in sorted(self.sentinels):
            if statuses(rid) and statuses(rid) != ["succeeded"]:
                r.fail(f"sentinel {rid} answered {statuses(rid)}")
        cancelled = [res for _, res in answers.results.get(self.cancelled_rid, [])]
        if cancelled and [res.status for res in cancelled] != ["cancelled"]:
            r.fail(f"the cancelled request {self.cancelled_rid} was answered "
                   f"{[(res.status, res.error) for res in cancelled]}")

    def _figures(self, answers: AnswerLog, counts: dict[str, Counter[str]],
                 waits: dict[str, list[float]]) -> None:
        r = self.report
        for kind in LANES:
            c = counts[kind]
            r.figures.update({f"fuzz_{kind}_{k}": c[k] for k in (
                "answered", "results", "dlq", "failed", "unanswered", "duplicates")})
            r.figures[f"fuzz_{kind}_max_answer_s"] = (round(max(waits[kind]), 2)
                                                      if waits[kind] else None)
        for kind in KINDS:
            tried = [s for s in self.sent if s.record.kind == kind
                     and s.record.shape not in ("sentinel", "cancel_sentinel")]
            if tried:
                r.figures[f"fuzz_{kind}_tried"] = len(tried)
                r.figures[f"fuzz_{kind}_refused"] = sum(s.refused is not None for s in tried)
                r.figures[f"fuzz_{kind}_produced"] = sum(s.where is not None for s in tried)
        r.figures["fuzz_sentinels"] = len(self.sentinels)
        r.figures["fuzz_sentinels_succeeded"] = sum(
            1 for rid in self.sentinels
            if [res.status for _, res in answers.results.get(rid, [])] == ["succeeded"])


def _answers_of(s: Sent, answers: AnswerLog) -> tuple[float | None, list[tuple[float, Any]],
                                                      list[tuple[float, Any]]]:
    """(first arrival, results, DLQ records) of a produced lane record."""
    results = list(answers.results.get(s.request_id, [])) if s.request_id else []
    letters = list(answers.dlq.get(s.where, [])) if s.where else []
    if s.request_id is not None and not results:
        return None, results, letters  # it names its request: only a result answers it
    times = [t for t, _ in results] + [t for t, _ in letters]
    return (min(times) if times else None), results, letters


async def fuzz_worker(settings: Settings, *, voice: str, plan: FuzzPlan,
                      store: ObjectStore) -> FuzzReport:
    """Generated records on tts.control, tts.voices and both request lanes against one
    worker (`settings` as fuzz_settings makes them); `voice` is registered in `store`."""
    return await WorkerRun(settings, voice=voice, plan=plan, store=store).run()
