"""The fuzz suite against the job aggregator: generated records on tts.results, its input.

    `voicefactory aggregator` in a process of its own (5-s job timeout, /readyz on a free
    port) -> tts.results: bench.fuzzgen's result records (garbage, wrong types, job refs
    out of range, totals up to 2**63, durations up to 1e308, ...) -> a two-line sentinel job
    -> wait for its event, then out the job timeout (the fuzz jobs that opened close too)
    -> checks: the sentinel's one `succeeded` event, every job at most one event, the
    group's committed offsets at the end of every tts.results partition, the process alive
    and /readyz 200, no "could not emit yet" retries and no crashed agent in its log, a
    clean exit on SIGTERM, over-limit records refused by the broker.

The aggregator reads no other topic of ours (tts.control cancels reach it as `cancelled`
results); its changelog is faust's own.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import TopicPartition

from bench.fuzzcheck import records
from bench.fuzzgen import FuzzRecord, Ids
from bench.fuzzrun import (
    AnswerLog,
    FuzzPlan,
    FuzzProducer,
    FuzzReport,
    Sent,
    check_refusals,
    http_status,
    topic_limit,
    until,
    wait_committed,
)
from bench.nginx import free_port
from bench.processes import WorkerProcess
from consumers.aggregator.app import app_id
from consumers.settings import Settings
from topics.events import AudioRef, JobCompleted, JobRef, SynthesisResult, encode
from topics.specs import RESULTS, topic_names


def _job_result(job_id: str, index: int, total: int) -> FuzzRecord:
    rid = f"{job_id}-{index:04d}"
    result = SynthesisResult(
        request_id=rid, voice_id="v", status="succeeded", completed_at="2031-01-01T00:00:00Z",
        audio=AudioRef(bucket="b", key=f"audio/2031/01/01/{rid}.wav", url="http://x",
                       format="wav", sample_rate=24000, duration_s=1.0, bytes=1,
                       sha256="0" * 64),
        job=JobRef(id=job_id, index=index, total=total), metadata={"text": f"line {index}"})
    return FuzzRecord(kind="results", shape="sentinel", key=job_id.encode(),
                      value=encode(result))


@dataclass
class _Seen:
    """What the run observed, for the checks."""

    sent: list[Sent] = field(default_factory=list)
    sent_at: float = 0.0  # when the sentinel job's first line went out
    jobs: dict[str, list[tuple[float, JobCompleted]]] = field(default_factory=dict)
    behind: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    alive: bool = False
    ready: int = 0


async def fuzz_aggregator(settings: Settings, *, plan: FuzzPlan, work_dir: Path,
                          job_timeout_s: int = 5) -> FuzzReport:
    """Generated records on tts.results against `voicefactory aggregator` in its own process,
    then a two-line job that must close once."""
    report = FuzzReport("aggregator", plan)
    names = topic_names(settings.kafka.topic_prefix)
    started = time.monotonic()
    limit = await topic_limit(settings.kafka, settings.kafka.topic_prefix)
    port = free_port()
    await asyncio.to_thread(work_dir.mkdir, parents=True, exist_ok=True)
    log_path = work_dir / f"fuzz-aggregator-{settings.kafka.topic_prefix.strip('.')}.log"
    proc = WorkerProcess(settings, log_path, args=["aggregator", "--log-format", "text"],
                         env={"VF_AGGREGATOR_PORT": str(port),
                              "VF_AGGREGATOR_DATADIR": str(work_dir / "fuzz-faust"),
                              "VF_JOB_TIMEOUT_SECONDS": str(job_timeout_s)})
    ids = Ids()
    sentinel = ids.job()
    seen = _Seen()
    try:
        await proc.wait_log("aggregating", 120)
        async with AnswerLog(settings, jobs=names.jobs) as answers:
            async with FuzzProducer(settings.kafka, limit) as producer:
                for rec in records("results", plan, ids, "v", limit):
                    seen.sent.append(await producer.send(names.results, rec))
                seen.sent_at = time.monotonic()
                for index in (0, 1):
                    seen.sent.append(await producer.send(names.results,
                                                         _job_result(sentinel, index, 2)))
            await until(lambda: bool(answers.jobs.get(sentinel)), plan.wait_s)
            await asyncio.sleep(job_timeout_s + 3)  # the fuzz jobs time out and close
            seen.behind = dict(await wait_committed(settings.kafka, app_id(settings),
                                                    [names.results], plan.wait_s))
            seen.alive = proc.proc.poll() is None
            seen.ready = await asyncio.to_thread(http_status, port, "/readyz")
            seen.jobs = dict(answers.jobs)
    finally:
        await proc.stop(timeout_s=30)
    _check(report, seen, sentinel, proc, log_path)
    tried = [s for s in seen.sent if s.record.shape != "sentinel"]
    closed = seen.jobs.get(sentinel)
    report.figures.update({
        "fuzz_results_tried": len(tried),
        "fuzz_results_refused": sum(s.refused is not None for s in tried),
        "fuzz_results_produced": sum(s.where is not None for s in tried),
        "fuzz_jobs_emitted": len(seen.jobs),
        "fuzz_sentinel_job_s": round(closed[0][0] - seen.sent_at, 2) if closed else None,
        "fuzz_aggregator_emit_retries": proc.log_text().count("could not emit yet"),
        "fuzz_aggregator_partitions_at_end": RESULTS.partitions - len(seen.behind),
        "fuzz_aggregator_seconds": round(time.monotonic() - started, 1)})
    return report


def _check(report: FuzzReport, seen: _Seen, sentinel: str, proc: WorkerProcess,
           log_path: Path) -> None:
    closed = seen.jobs.get(sentinel)
    if not closed:
        report.fail(f"the sentinel job {sentinel} never closed")
    elif [job.status for _, job in closed] != ["succeeded"]:
        report.fail(f"the sentinel job closed as {[job.status for _, job in closed]}")
    for job_id, events in sorted(seen.jobs.items()):
        if len(events) > 1:
            report.fail(f"job {job_id} emitted {len(events)} times")
    for tp, (done, end) in seen.behind.items():
        report.fail(f"committed offset of {tp} is {done}, end {end}")
    if not seen.alive:
        report.fail(f"the aggregator exited with {proc.proc.returncode} during the run")
    if seen.ready != 200:
        report.fail(f"the aggregator's /readyz answered {seen.ready}")
    if proc.proc.returncode not in (0, None):
        report.fail(f"the aggregator exited with {proc.proc.returncode} on SIGTERM")
    text = proc.log_text()
    retries = text.count("could not emit yet")
    if retries:
        report.fail(f'{retries} emit retries ("could not emit yet") in {log_path}')
    if "crashed" in text.lower():
        report.fail(f"a crash in the aggregator's log ({log_path})")
    check_refusals(report, seen.sent)
