"""`voicefactory job run SCRIPT`: a video script in, one request per line out, results followed.

Flow: SCRIPT (YAML or JSON) -> `consumers.clients.scripts.load_script` (every line checked by
the worker's own request rules, so a bad line fails there with exit 2, before anything is
produced) -> `check_voices` (every voice the script names is registered, else exit 2 naming
each unknown voice with its lines: a typo costs no round trip through the fleet) ->
`submit` (`consumers.clients.revisions.prepare_run`: version 1 of a new job ID, else the
next version of a finished one with only its changed or failed lines, else "unchanged",
nothing produced) -> `put_manifest`: `jobs/{job_id}[/v{N}]/script.json` in the store (the
texts for the subtitles, the job's gap / concat options and a revision's carried clips,
read by the aggregator) -> requests routed (consumers.fleet: bounded loads over the fleet
view, keys `voice_id` or `voice_id#shard`), each with `job: {id, index, total[, version]}`
and the request ID `{job_id}-{index:04d}` (`{job_id}-v{N}-{index:04d}` in version N) ->
`tts.requests`. `job rerun JOB --failed | --lines` is the same from `prepare_rerun`.

With `--wait`: the job's one `tts.results` partition (results are keyed by job ID) and its
`tts.jobs` partition are assigned and their ends noted *before* the requests go out; results
are then read from there, one per index (duplicates ignored), a progress line is redrawn on
stderr (done, failed, rate, ETA), a summary table goes to stdout, and the aggregator's job
event (of this version) is awaited for a few seconds to print where the subtitles (and
the track) are.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import msgspec
from aiokafka import TopicPartition

from consumers.clients.revisions import Submission, prepare_rerun, prepare_run
from consumers.fleet.router import ROUTE_REASONS
from consumers.fleet.sending import RoutedSender, routed
from consumers.kafka import make_consumer, make_producer
from consumers.settings import Settings
from consumers.wiring import make_store
from pipeline.jobscript import Script, encode_manifest
from pipeline.keys import job_script_key, voice_json_key
from pipeline.storage import ObjectStore
from topics.errors import ErrorCode, LocalError
from topics.events import (
    JobCompleted,
    SynthesisRequest,
    SynthesisResult,
    decode_job,
    decode_result,
)
from topics.partitioning import partition_for
from topics.specs import JOBS, RESULTS, topic_names
from topics.tenancy import record_tenant, tenant_of


class UnknownVoices(LocalError):
    """Voices the script names that are not registered, each with its (1-based) lines."""

    default_code = ErrorCode.VOICE_NOT_FOUND

    def __init__(self, missing: dict[str, list[int]]) -> None:
        self.missing = missing
        named = "; ".join(f"{voice!r} on line{'s' if len(lines) > 1 else ''} "
                          f"{_line_list(lines)}" for voice, lines in missing.items())
        super().__init__(f"{len(missing)} voice{'s are' if len(missing) > 1 else ' is'} not "
                         f"registered: {named} (register with `voicefactory voices add`, or "
                         "fix the script)")


def _line_list(lines: list[int], most: int = 10) -> str:
    shown = ", ".join(map(str, lines[:most]))
    return shown if len(lines) <= most else f"{shown} and {len(lines) - most} more"


def check_voices(store: ObjectStore, script: Script, *, tenant: str | None = None) -> None:
    """Raise UnknownVoices unless every voice of the script has its voice.json among the
    tenant's voices (another tenant's voice of that ID is as unknown as a typo)."""
    lines_of: dict[str, list[int]] = {}
    for number, request in enumerate(script.requests, start=1):
        lines_of.setdefault(request.voice_id, []).append(number)
    missing = {voice: lines for voice, lines in lines_of.items()
               if store.stat(voice_json_key(voice, tenant=tenant)) is None}
    if missing:
        raise UnknownVoices(missing)


# --- progress and summary -----------------------------------------------------------------


@dataclass
class Progress:
    total: int
    started: float = field(default_factory=time.monotonic)
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0  # `voicefactory cancel` on a line is not a failure of the line

    @property
    def done(self) -> int:
        return self.succeeded + self.failed + self.cancelled

    def add(self, result: SynthesisResult) -> None:
        if result.status == "succeeded":
            self.succeeded += 1
        elif result.status == "cancelled":
            self.cancelled += 1
        else:
            self.failed += 1

    def render(self, now: float | None = None, width: int = 24) -> str:
        elapsed = max((now if now is not None else time.monotonic()) - self.started, 1e-6)
        filled = round(width * self.done / self.total)
        rate = self.done / elapsed
        if self.done == self.total:
            eta = "done"
        elif self.done == 0:
            eta = "ETA --"
        else:
            eta = f"ETA {_duration((self.total - self.done) / rate)}"
        cancelled = f"  cancelled {self.cancelled}" if self.cancelled else ""
        return (f"[{'#' * filled}{'-' * (width - filled)}] {self.done}/{self.total}  "
                f"ok {self.succeeded}  failed {self.failed}{cancelled}  {rate:.2f} lines/s  "
                f"{eta}")


class ProgressLine:
    """Redraws one line on a terminal; elsewhere (CI logs) prints at most once a second."""

    def __init__(self, progress: Progress, stream: TextIO) -> None:
        self.progress = progress
        self.stream = stream
        self.tty = stream.isatty()
        self._last = 0.0

    def update(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.tty:
            self.stream.write("\r\x1b[2K" + self.progress.render(now))
        elif force or now - self._last >= 1.0:
            self.stream.write(self.progress.render(now) + "\n")
        else:
            return
        self._last = now
        self.stream.flush()

    def finish(self) -> None:
        self.update(force=True)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _index(request: SynthesisRequest) -> int:
    return request.job.index if request.job is not None else 0


def summary_table(script: Script, results: dict[int, SynthesisResult]) -> str:
    """One row per produced line, by its job index (a revision produces only some)."""
    rows = [("#", "voice", "status", "dur_s", "request_id", "object / error")]
    for request in script.requests:
        i = _index(request)
        result = results.get(i)
        if result is None:
            rows.append((str(i), request.voice_id, "missing", "-", request.request_id,
                         "no result"))
        elif result.audio is not None:
            rows.append((str(i), request.voice_id, result.status,
                         f"{result.audio.duration_s:.2f}", request.request_id,
                         f"s3://{result.audio.bucket}/{result.audio.key}"))
        else:
            err = result.error
            rows.append((str(i), request.voice_id, result.status, "-", request.request_id,
                         f"{err.code}: {err.message}" if err else "-"))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]) - 1)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r[:-1], widths, strict=True))
             + "  " + r[-1] for r in rows]
    audio_s = sum(r.audio.duration_s for r in results.values() if r.audio is not None)
    tally = Progress(total=len(script.requests))  # the progress line's own counts
    for result in results.values():
        tally.add(result)
    cancelled = f"{tally.cancelled} cancelled, " if tally.cancelled else ""
    lines.append(f"{tally.total} lines: {tally.succeeded} succeeded, {tally.failed} failed, "
                 f"{cancelled}{tally.total - tally.done} missing; {audio_s:.1f} s of audio")
    return "\n".join(line.rstrip() for line in lines)


def describe_job(event: JobCompleted) -> str:
    version = event.version or 1
    carried = sum(1 for c in event.clips if (c.version or 1) < version)
    kept = f" ({carried} carried from earlier versions)" if carried else ""
    name = f"{event.job_id} v{version}" if version > 1 else event.job_id
    out = [f"job {name} {event.status}: {len(event.clips)}/{event.total} clips{kept}, "
           f"{event.duration_s:.2f} s on the timeline"]
    if event.subtitles:
        out.append(f"subtitles {event.subtitles}")
    if event.track is not None:
        out.append(f"track     s3://{event.track.bucket}/{event.track.key}")
    return "\n".join(out)


def _duration(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{whole}s"


# --- producing and following --------------------------------------------------------------


@dataclass
class Outcome:
    results: dict[int, SynthesisResult]
    job: JobCompleted | None
    timed_out: bool

    def all_succeeded(self, total: int) -> bool:
        return len(self.results) == total and all(
            r.status == "succeeded" for r in self.results.values())


def put_manifest(store: ObjectStore, script: Script, *, tenant: str | None = None) -> None:
    """Write the script's version's script.json (before any of its requests exists)."""
    manifest = script.manifest
    store.put(job_script_key(script.job_id, manifest.version, tenant=tenant),
              encode_manifest(manifest), "application/json")


def _owned(submission: Submission, tenant: str | None) -> Submission:
    """The submission's requests stamped with their tenant (never taken from a script)."""
    owner = record_tenant(tenant)
    return dataclasses.replace(submission, requests=[
        msgspec.structs.replace(r, tenant=owner) for r in submission.requests])


def submit(store: ObjectStore, script: Script, *, tenant: str | None = None) -> Submission:
    """The shared `job run` / POST /v1/jobs operation up to producing: voices checked,
    the version planned (`revisions.prepare_run`), its manifest stored, all within the
    tenant. The caller produces `submission.requests` (none when `unchanged`)."""
    check_voices(store, script, tenant=tenant)
    submission = _owned(prepare_run(store, script, tenant=tenant), tenant)
    if not submission.unchanged:
        put_manifest(store, submission.script, tenant=tenant)
    return submission


def submit_rerun(store: ObjectStore, job_id: str, *, failed: bool,
                 lines: frozenset[int] = frozenset(),
                 tenant: str | None = None) -> Submission:
    """`job rerun`: the latest finished version's lines without audio and/or those named."""
    submission = _owned(prepare_rerun(store, job_id, failed=failed, lines=lines,
                                      tenant=tenant), tenant)
    if not submission.unchanged:
        check_voices(store, submission.script, tenant=tenant)
        put_manifest(store, submission.script, tenant=tenant)
    return submission


async def run_job(settings: Settings, script: Script, *, wait: bool, timeout_s: float,
                  job_timeout_s: float, stream: TextIO = sys.stderr) -> Outcome | None:
    """Produce the script's requests; with `wait`, follow them until answered or timed out."""
    names = topic_names(settings.kafka.topic_prefix)
    consumer = make_consumer(settings.kafka, enable_auto_commit=False, group_id=None) if wait \
        else None
    producer = make_producer(settings.kafka, linger_ms=5)
    await producer.start()
    try:
        tps: Sequence[TopicPartition] = ()
        if consumer is not None:
            await consumer.start()
            tps = [TopicPartition(names.results, partition_for(script.job_id,
                                                               RESULTS.partitions)),
                   TopicPartition(names.jobs, partition_for(script.job_id, JOBS.partitions))]
            consumer.assign(list(tps))
            await consumer.seek_to_end(*tps)
            for tp in tps:  # resolve the ends now, before the requests exist
                await consumer.position(tp)
        # Routed (consumers.fleet): a voice's lines stay on its worker until that worker is
        # past job_balance x the fleet's mean load, then spill to the voice's next shards.
        sender, view = await routed(settings, producer, "batch",
                                    balance=settings.routing.job_balance)
        try:
            futures = [(await sender.send(r))[1] for r in script.requests]
        finally:
            if view is not None:
                await view.stop()
        await asyncio.gather(*futures)
        spread = _spread(sender)
        print(f"job {script.job_id}: {len(script.requests)} requests produced to "
              f"{names.requests}{spread}", file=stream, flush=True)
        if consumer is None:
            return None
        return await _follow(consumer, script, names.results, names.jobs, timeout_s,
                             job_timeout_s, stream)
    finally:
        if consumer is not None:
            await consumer.stop()
        await producer.stop()


def _spread(sender: RoutedSender) -> str:
    """', routed to 3 workers (home 12, copy 27, moved 1)' or '' (routing off, or no
    worker in the fleet view): where the lines went, and why (ROUTE_REASONS; moved: a
    worker that loads the voice's profile for them)."""
    router = sender.router
    if router is None or not router.outstanding:
        return ""
    workers = [w for w in router.workers(sender.lane) if router.load(sender.lane, w)]
    why = ", ".join(f"{reason} {sender.reasons[reason]}" for reason in ROUTE_REASONS
                    if sender.reasons[reason])
    return f", routed to {len(workers)} worker{'s' if len(workers) != 1 else ''} ({why})"


async def _follow(consumer: Any, script: Script, results_topic: str, jobs_topic: str,
                  timeout_s: float, job_timeout_s: float, stream: TextIO) -> Outcome:
    progress = Progress(total=len(script.requests))
    line = ProgressLine(progress, stream)
    wanted = {r.request_id: _index(r) for r in script.requests}
    version = script.manifest.version
    # Job IDs are unique within a tenant: another tenant's job of this ID shares the key.
    tenant = tenant_of(script.requests[0].tenant if script.requests else None)
    results: dict[int, SynthesisResult] = {}
    job: JobCompleted | None = None
    deadline = time.monotonic() + timeout_s
    job_deadline: float | None = None
    line.update(force=True)
    while True:
        now = time.monotonic()
        if len(results) == len(wanted) and job_deadline is None:
            line.finish()
            job_deadline = now + job_timeout_s
        if job is not None or (job_deadline is not None and now >= job_deadline):
            break
        if job_deadline is None and now >= deadline:
            line.finish()
            return Outcome(results=results, job=None, timed_out=True)
        batches = await consumer.getmany(timeout_ms=250)
        for tp, records in batches.items():
            for rec in records:
                if tp.topic == jobs_topic:
                    if rec.key == script.job_id.encode() and rec.value:
                        event = decode_job(rec.value)
                        if (event.version or 1) == version and \
                                tenant_of(event.tenant) == tenant:
                            job = event
                    continue
                result = decode_result(rec.value or b"{}")
                index = wanted.get(result.request_id)
                if index is None or index in results or result.job is None \
                        or tenant_of(result.tenant) != tenant:
                    continue  # another job's result (or tenant's), or a duplicate
                results[index] = result
                progress.add(result)
        if job_deadline is None:
            line.update()
    return Outcome(results=results, job=job, timed_out=False)


def run_command(settings: Settings, script: Script, *, wait: bool, timeout_s: float,
                job_timeout_s: float, out: TextIO | None = None,
                err: TextIO | None = None, tenant: str | None = None) -> int:
    """`job run` after the script parsed: 0 when every line succeeded (or, without --wait,
    when every request was produced), 1 otherwise."""
    return run_submission(settings, submit(make_store(settings.store), script, tenant=tenant),
                          wait=wait,
                          timeout_s=timeout_s, job_timeout_s=job_timeout_s, out=out, err=err)


def run_submission(settings: Settings, submission: Submission, *, wait: bool,
                   timeout_s: float, job_timeout_s: float, out: TextIO | None = None,
                   err: TextIO | None = None) -> int:
    """Produce a prepared version (`submit`, `submit_rerun`) and report as `job run`
    (`out`, `err`: None is sys.stdout / sys.stderr as they are at the call)."""
    out, err = out or sys.stdout, err or sys.stderr
    print(submission.describe(), file=err)
    if submission.unchanged:
        return 0
    script = submission.script
    key = job_script_key(script.job_id, submission.version,
                         tenant=script.requests[0].tenant if script.requests else None)
    print(f"job {script.job_id}: script s3://{settings.store.bucket}/{key}", file=err)
    outcome = asyncio.run(run_job(settings, script, wait=wait, timeout_s=timeout_s,
                                  job_timeout_s=job_timeout_s, stream=err))
    total = len(script.requests)
    if outcome is None:
        return 0
    print(summary_table(script, outcome.results), file=out)
    if outcome.timed_out:
        print(f"timed out after {timeout_s:.0f} s with {total - len(outcome.results)} lines "
              "unanswered; is a worker running (`voicefactory worker`)?", file=err)
    elif outcome.job is not None:
        print(describe_job(outcome.job), file=out)
    elif job_timeout_s > 0:
        print(f"no job event within {job_timeout_s:.0f} s of the last result; is "
              "`voicefactory aggregator` running?", file=err)
    return 0 if outcome.all_succeeded(total) else 1
