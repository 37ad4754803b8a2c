"""Job revisions: which lines a new version of a job re-produces, and the manifest that
lets the aggregator close that version from the rest.

    job run SCRIPT / POST /v1/jobs ------------> `prepare_run(store, script)`
    job rerun JOB --failed | --lines 3,7 ------> `prepare_rerun(store, job_id, ...)`
    POST /v1/jobs/{id}/rerun (the console) --'    (refused while a version is still open)
        |  latest finished version N: the highest N whose jobs/{id}[/vN]/job.json exists
        |  (none: this is version 1, produced whole, as before revisions existed)
        v
    `plan_lines(version N's manifest lines and event clips, the new lines)`  (pure)
        -> {index: why}: changed, new, failed (kept from N without audio), asked
        v
    `Submission`: version N+1's manifest (every line, plus N's clips for the lines not
    re-produced: `carried`) for jobs/{id}/v{N+1}/script.json, and the requests to produce,
    request IDs `{job_id}-v{N+1}-{index:04d}` (new IDs: a changed line must not be answered
    from the object stored for its old text), `job.version` N+1.

The previous version's line state is read from the store, not from Kafka: its job.json
(the event: each clip's status and audio) and its script.json (each line's voice, text and
request options, to tell a changed line from an unchanged one). Nothing else remembers a
job between versions, so the CLI and the gateway share this one operation.

`job run` with an unchanged script produces nothing (`Submission.unchanged`): re-running
failed lines is asked for explicitly with `job rerun --failed`, while a changed script
also re-produces the lines version N left without audio, since a new version is made
anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import msgspec
import orjson

from pipeline.jobscript import JobManifest, ManifestLine, Script, ScriptError, decode_manifest
from pipeline.keys import job_json_key, job_script_key
from pipeline.storage import ObjectStore
from topics.errors import LocalError, VoiceFactoryError
from topics.events import JobClip, JobCompleted, JobRef, SynthesisRequest, decode_job
from topics.validation import REQUEST_ID_MAX, decode_request


class RevisionError(LocalError):
    """A revision that cannot be made (nothing to revise, a line out of range, ...)."""


class UnknownJob(RevisionError):
    """No version of the job was ever stored: neither a script.json nor a job.json."""


def _content(line: ManifestLine, *, legacy: bool) -> tuple[str, str, str]:
    # A manifest from before revisions has no options: compare voice and text only.
    options = "" if legacy else orjson.dumps(line.options or {},
                                             option=orjson.OPT_SORT_KEYS).decode()
    return line.voice_id, line.text, options


def plan_lines(previous: list[ManifestLine], clips: list[JobClip], lines: list[ManifestLine],
               *, failed: bool = False, asked: frozenset[int] = frozenset()) -> dict[int, str]:
    """Which of `lines` (the new version's, by index) to produce, each with why.

    `previous` and `clips` are the finished version's manifest lines and event clips.
    changed: voice, text or options differ; new: beyond the previous total; asked: named by
    index; failed: no audio in the previous version (answered failed, rejected, expired,
    cancelled, or missing), re-produced with `failed` or whenever the script itself was
    edited (a line changed, added or removed), not for lines asked by index alone.
    """
    bad = sorted(i for i in asked if not 0 <= i < len(lines))
    if bad:
        raise RevisionError(f"line index {bad[0]} is outside 0..{len(lines) - 1} (indices "
                            "as in the job event's clips[].index and job run's # column)")
    legacy = any(line.options is None for line in previous)
    before = {line.index: _content(line, legacy=legacy) for line in previous}
    with_audio = {c.index for c in clips if c.status == "succeeded" and c.audio is not None}
    plan: dict[int, str] = {}
    for line in lines:
        i = line.index
        if i in asked:
            plan[i] = "asked"
        elif i not in before:
            plan[i] = "new"
        elif _content(line, legacy=legacy) != before[i]:
            plan[i] = "changed"
    edited = any(why in ("changed", "new") for why in plan.values())
    if failed or edited or len(lines) != len(previous):
        for line in lines:
            if line.index not in plan and line.index not in with_audio:
                plan[line.index] = "failed"
    return dict(sorted(plan.items()))


def revision_request_id(job_id: str, index: int, version: int) -> str:
    """`{job_id}-v{N}-{index:04d}` for version N >= 2 (version 1 keeps `{job_id}-{index}`)."""
    rid = f"{job_id}-v{version}-{index:04d}"
    if len(rid) > REQUEST_ID_MAX:
        raise RevisionError(f"job_id {job_id!r} is too long for revisions: request ID {rid!r} "
                            f"would have {len(rid)} characters, limit {REQUEST_ID_MAX}")
    return rid


@dataclass(frozen=True)
class Submission:
    """What one `job run` / `job rerun` / POST /v1/jobs produces: version `version` of
    the job, `requests` (only the re-produced lines for a revision) and the manifest to
    store before them. `unchanged`: nothing to produce, version `version` stays current."""

    job_id: str
    version: int
    manifest: JobManifest
    requests: list[SynthesisRequest]
    reasons: dict[int, str] = field(default_factory=dict)
    unchanged: bool = False
    without_audio: list[int] = field(default_factory=list)  # of version `version`, if unchanged

    @property
    def script(self) -> Script:
        """The submission as a `Script` of the requests to produce (for `run_job`)."""
        return Script(job_id=self.job_id, requests=self.requests, manifest=self.manifest)

    def describe(self) -> str:
        if self.unchanged:
            left = (f"; lines without audio: {','.join(map(str, self.without_audio))} "
                    f"(`job rerun {self.job_id} --failed` re-runs them)"
                    if self.without_audio else "")
            return (f"job {self.job_id}: unchanged since version {self.version}, nothing "
                    f"produced{left}")
        if self.version == 1:
            return f"job {self.job_id}: version 1, {len(self.requests)} lines"
        why: dict[str, list[int]] = {}
        for index, reason in self.reasons.items():
            why.setdefault(reason, []).append(index)
        parts = ", ".join(f"{reason} {','.join(map(str, idx))}" for reason, idx in why.items())
        return (f"job {self.job_id}: version {self.version} re-produces "
                f"{len(self.requests)} of {self.manifest.total} lines ({parts}); "
                f"{len(self.manifest.carried)} carried from version "
                f"{self.manifest.base_version}")


@dataclass(frozen=True)
class Finished:
    """The latest finished version of a job: its event and its manifest."""

    version: int
    event: JobCompleted
    manifest: JobManifest | None


def latest_finished(store: ObjectStore, job_id: str, *,
                    tenant: str | None = None) -> Finished | None:
    """The highest version whose job.json exists (versions are consecutive from 1), among
    the tenant's jobs only."""
    found: Finished | None = None
    version = 1
    while True:
        raw = store.get(job_json_key(job_id, version, tenant=tenant))
        if raw is None:
            return found
        script = store.get(job_script_key(job_id, version, tenant=tenant))
        manifest = decode_manifest(script) if script is not None else None
        found = Finished(version=version, event=decode_job(raw), manifest=manifest)
        version += 1


def prepare_run(store: ObjectStore, script: Script, *,
                tenant: str | None = None) -> Submission:
    """`job run` / POST /v1/jobs: version 1 for a new job ID (or one still open), else the
    next version with the lines that changed or failed."""
    done = latest_finished(store, script.job_id, tenant=tenant)
    if done is None:
        return Submission(job_id=script.job_id, version=1, manifest=script.manifest,
                          requests=list(script.requests))
    previous = _previous_lines(done)
    plan = plan_lines(previous, done.event.clips, script.manifest.lines)
    if not plan:
        if len(script.requests) != done.event.total:
            raise RevisionError(f"job {script.job_id}: lines were only removed; a version "
                                "with no line to produce cannot be closed; change a line "
                                "or rerun one (`job rerun --lines`)")
        return Submission(job_id=script.job_id, version=done.version,
                          manifest=script.manifest, requests=[], unchanged=True,
                          without_audio=_without_audio(done.event))
    return _revision(done, script.manifest, list(script.requests), plan)


def prepare_rerun(store: ObjectStore, job_id: str, *, failed: bool,
                  lines: frozenset[int] = frozenset(),
                  tenant: str | None = None) -> Submission:
    """`job rerun JOB --failed | --lines ...`: the latest finished version's own script,
    re-producing its lines without audio (`failed`) and/or the lines named by index."""
    done = latest_finished(store, job_id, tenant=tenant)
    if done is None:
        if store.stat(job_script_key(job_id, tenant=tenant)) is None:
            raise UnknownJob(f"job {job_id} is unknown: no jobs/{job_id}/script.json or "
                             "job.json; `job run` its script first")
        raise RevisionError(f"job {job_id} has no finished version to re-run (no "
                            f"jobs/{job_id}/job.json): version 1 is still open")
    # A re-run of version N while N+1 runs would plan N+1 again under its open requests.
    if store.stat(job_script_key(job_id, done.version + 1, tenant=tenant)) is not None:
        raise RevisionError(f"job {job_id}: version {done.version + 1} is still open (no "
                            "job.json yet); re-run once the aggregator closed it")
    previous = _previous_lines(done)
    base = done.manifest or _manifest_from_event(done.event)
    requests = [_request(job_id, line, base.total) for line in previous]
    plan = plan_lines(previous, done.event.clips, previous, failed=failed, asked=lines)
    if not plan:
        return Submission(job_id=job_id, version=done.version, manifest=base, requests=[],
                          unchanged=True, without_audio=_without_audio(done.event))
    return _revision(done, base, requests, plan)


def _without_audio(event: JobCompleted) -> list[int]:
    with_audio = {c.index for c in event.clips if c.audio is not None}
    return [i for i in range(event.total) if i not in with_audio]


def _previous_lines(done: Finished) -> list[ManifestLine]:
    return (done.manifest or _manifest_from_event(done.event)).lines


def _manifest_from_event(event: JobCompleted) -> JobManifest:
    """A job produced without `job run` has no script: its event's clips stand in."""
    return JobManifest(job_id=event.job_id, total=event.total, created_at=_now(),
                       gap_ms=event.gap_ms,
                       lines=[ManifestLine(index=c.index, request_id=c.request_id,
                                           voice_id=c.voice_id, text=c.text)
                              for c in event.clips])


def _request(job_id: str, line: ManifestLine, total: int) -> SynthesisRequest:
    obj = {**(line.options or {}), "request_id": line.request_id, "voice_id": line.voice_id,
           "text": line.text, "job": {"id": job_id, "index": line.index, "total": total}}
    try:
        return decode_request(orjson.dumps(obj))
    except VoiceFactoryError as exc:
        raise ScriptError(f"job {job_id}: line {line.index} of the stored script no longer "
                          f"passes the request rules: {exc.message}") from None


def _revision(done: Finished, manifest: JobManifest, requests: list[SynthesisRequest],
              plan: dict[int, str]) -> Submission:
    job_id, version, total = done.event.job_id, done.version + 1, manifest.total
    produced = []
    for request in requests:
        assert request.job is not None  # scripts and stored lines always have one
        if request.job.index in plan:
            rid = revision_request_id(job_id, request.job.index, version)
            produced.append(msgspec.structs.replace(
                request, request_id=rid,
                job=JobRef(id=job_id, index=request.job.index, total=total, version=version)))
    ids = {c.index: c.request_id for c in done.event.clips}
    ids.update({r.job.index: r.request_id for r in produced if r.job is not None})
    lines = [msgspec.structs.replace(line, request_id=ids.get(line.index, line.request_id))
             for line in manifest.lines]
    carried = [msgspec.structs.replace(c, version=c.version or 1) for c in done.event.clips
               if c.index not in plan and c.index < total]
    revised = msgspec.structs.replace(manifest, version=version, base_version=done.version,
                                      carried=carried, lines=lines, created_at=_now())
    return Submission(job_id=job_id, version=version, manifest=revised, requests=produced,
                      reasons=plan)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
