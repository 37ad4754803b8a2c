"""What the job aggregator remembers per job, and the rules that merge results into it.

Flow: a `tts.result.v1` with `job: {id, index, total}` -> `merge` into the job's `JobState`
(the value of the aggregator's table, one per job of a tenant: key `table_key`, persisted in
its changelog topic; the state keeps the tenant, which its objects and event carry) ->
once `ready` (every index answered, or no result for the timeout) -> `build_job` with the
job's `JobManifest` (the script, for each line's text and the job's options) -> the
`tts.job.v1` event. After the event is out the state shrinks to an `emitted` marker that
keeps late duplicates from reopening the job.

Merging is idempotent and order-free, so redelivered and out-of-order results never double
or reorder a clip: a clip is keyed by its index; a succeeded clip is never replaced; a
failed, rejected, expired or cancelled one is replaced by any later answer for the same index.

Cancelled lines (a tts.control cancel of the job or of single lines, docs/lanes.md) are
answered `cancelled` by the workers, so they count as answered: a job cancelled wholesale
is complete, and closes, once its last line's `cancelled` result is merged, not at its
timeout. Its event keeps the job.v1 fields: each such clip has status `cancelled` and no
audio, and the job is `partial` if any line succeeded before the cancel, else `failed`.
`merge_result` also names what a result did (merged, duplicate, late, ...) for the
aggregator's metrics. Everything here is pure (no Kafka, no store) and unit-tested.

Revisions (docs/jobs.md, "Revising a job"): a job keeps its ID across versions; each
request says its version in `job.version` (absent: 1). A result for version N+1 of a job
whose table entry is version N's emitted marker opens version N+1 (`open_version`: seeded
with the clips the revision's manifest carries over unchanged from version N, so only the
re-produced lines remain to answer). Results for an older version than the table's are
`late`; one for a newer version while the table's version is still open is `early` and
dropped with a warning (the client only revises a version whose job.json exists, so this
needs a version whose event failed to produce between its job.json and its marker).
"""

from __future__ import annotations

import logging
from typing import Literal, NamedTuple

import msgspec

from pipeline.jobscript import (  # re-exported: the manifest was defined here
    MANIFEST_SCHEMA,
    JobManifest,
    ManifestLine,
    decode_manifest,
    encode_manifest,
)
from pipeline.subtitles import lay_out
from topics.events import (
    AudioRef,
    ErrorInfo,
    JobClip,
    JobCompleted,
    JobRef,
    JobStatus,
    Status,
    SynthesisResult,
)
from topics.tenancy import record_tenant, scoped_id
from topics.validation import REQUEST_ID_MAX, check_id

log = logging.getLogger(__name__)

__all__ = ["MANIFEST_SCHEMA", "JobManifest", "ManifestLine", "decode_manifest",
           "encode_manifest"]

# Most lines a job may have. A closed job lists every index it never received (`missing`), so
# one stray result claiming total 2**62 would have the aggregator build that list when the
# job times out; a real script stays far below (its job.v1 event must fit one Kafka record).
MAX_JOB_TOTAL = 10_000
MAX_CLIP_SECONDS = 3600.0  # one line of <= 2,000 characters is minutes of speech at most


class ClipState(msgspec.Struct, omit_defaults=True, kw_only=True):
    request_id: str
    voice_id: str
    status: Status
    audio: AudioRef | None = None
    error: ErrorInfo | None = None
    text: str | None = None  # from the result's metadata.text, for producers without a script
    version: int = 1  # the job version whose request produced it


class JobState(msgspec.Struct, omit_defaults=True, kw_only=True):
    job_id: str
    total: int
    first_seen: float  # wall-clock seconds (time.time()) of the first result
    last_seen: float  # ... of the latest result that changed or repeated a clip
    clips: dict[int, ClipState] = msgspec.field(default_factory=dict)
    emitted: bool = False
    emitted_at: float | None = None
    status: JobStatus | None = None  # of the emitted event
    version: int = 1
    tenant: str | None = None  # the owner (results' `tenant`); None: `default`

    @property
    def complete(self) -> bool:
        return len(self.clips) >= self.total


_state_encoder = msgspec.json.Encoder()
_state_decoder = msgspec.json.Decoder(JobState)


def encode_state(state: JobState) -> bytes:
    return _state_encoder.encode(state)


def decode_state(raw: bytes) -> JobState:
    return _state_decoder.decode(raw)



# What one result did to its job, for the aggregator's metrics (vf_job_results_total):
# merged: a new index; replaced: a failed/rejected/expired/cancelled clip answered again;
# duplicate: the index had succeeded already (kept); late: the job was already emitted;
# invalid: unusable job ID, index, total or audio duration; no_job: the result is not part
# of a job.
# early: a result for a newer version than the one still open (see the module doc).
MergeOutcome = Literal["merged", "replaced", "duplicate", "late", "early", "invalid",
                       "no_job"]


class Merge(NamedTuple):
    state: JobState | None  # what to store; None: nothing worth keeping changed
    outcome: MergeOutcome


def merge(state: JobState | None, result: SynthesisResult, now: float) -> JobState | None:
    """The state after `result`, or None when the result changes nothing worth keeping
    (not part of a job, out of range, or late for a job already emitted)."""
    return merge_result(state, result, now).state


def merge_result(state: JobState | None, result: SynthesisResult, now: float) -> Merge:
    """`merge`, also saying what the result did (see `MergeOutcome`)."""
    job = result.job
    if job is None:
        return Merge(None, "no_job")
    ctx = {"request_id": result.request_id, "voice_id": result.voice_id}
    if not _usable(result, job, ctx):
        return Merge(None, "invalid")
    version = result_version(result)
    if state is not None and version != state.version:
        if version < state.version:
            log.debug("job %s: result of version %d for index %d; the job is at version %d, "
                      "ignored", job.id, version, job.index, state.version, extra=ctx)
            return Merge(None, "late")
        if not state.emitted:
            log.warning("job %s: result of version %d for index %d while version %d is "
                        "still open; dropped", job.id, version, job.index, state.version,
                        extra=ctx)
            return Merge(None, "early")
        state = None  # a newer version than the emitted one: it opens (unseeded) below
    if state is None:
        state = JobState(job_id=job.id, total=job.total, first_seen=now, last_seen=now,
                         version=version, tenant=record_tenant(result.tenant))
    elif state.emitted:
        log.debug("job %s: result for index %d after the job was emitted, ignored", job.id,
                 job.index, extra=ctx)
        return Merge(None, "late")
    elif job.total != state.total:
        # The first answer fixes the total; a disagreeing producer is a bug worth a warning,
        # not a reason to drop a clip that fits.
        log.warning("job %s: result says total %d, job has %d", job.id, job.total,
                    state.total, extra=ctx)
        if job.index >= state.total:
            return Merge(None, "invalid")
    clips = dict(state.clips)
    old = clips.get(job.index)
    if old is not None and old.status == "succeeded":
        if old.request_id != result.request_id:
            log.warning("job %s: index %d answered by %s and %s; keeping the first success",
                        job.id, job.index, old.request_id, result.request_id, extra=ctx)
        return Merge(msgspec.structs.replace(state, last_seen=now), "duplicate")
    text = (result.metadata or {}).get("text")
    clips[job.index] = ClipState(request_id=result.request_id, voice_id=result.voice_id,
                                 status=result.status, audio=result.audio, error=result.error,
                                 text=text if isinstance(text, str) else None,
                                 version=version)
    return Merge(msgspec.structs.replace(state, clips=clips, last_seen=now),
                 "merged" if old is None else "replaced")


def _usable(result: SynthesisResult, job: JobRef, ctx: dict[str, str]) -> bool:
    """False (with a warning) for a job ID, total, index or audio duration that would
    corrupt the job."""
    try:
        check_id("job.id", job.id, REQUEST_ID_MAX)  # it becomes part of object keys
    except ValueError as exc:
        log.warning("result with an unusable job ID ignored: %s", exc, extra=ctx)
        return False
    if job.total > MAX_JOB_TOTAL:
        log.warning("job %s: result says total %d, more than %d lines; ignored", job.id,
                    job.total, MAX_JOB_TOTAL, extra=ctx)
        return False
    if not 0 <= job.index < job.total:
        log.warning("job %s: result index %d outside 0..%d, ignored", job.id, job.index,
                    job.total - 1, extra=ctx)
        return False
    if (job.version or 1) < 1:
        log.warning("job %s: result says version %d; ignored", job.id, job.version, extra=ctx)
        return False
    audio = result.audio
    if audio is not None and not 0.0 <= audio.duration_s <= MAX_CLIP_SECONDS:  # NaN too
        # The timeline and subtitles are laid out from it: a negative or infinite one made
        # every attempt to close the job fail, and the timer retried it forever.
        log.warning("job %s: index %d has audio of %r s, ignored", job.id, job.index,
                    audio.duration_s, extra=ctx)
        return False
    return True


def table_key(result: SynthesisResult) -> bytes:
    """A job's key in the aggregator's table: job IDs are unique within a tenant only, so
    `scoped_id(tenant, job_id)` (the bare ID for `default`: tables written before tenancy
    keep their keys)."""
    assert result.job is not None
    return scoped_id(result.tenant, result.job.id).encode()


def job_id_of(key: bytes) -> str:
    """The job ID in a table key (`/` is outside the ID charset: the part after it)."""
    return key.decode().rsplit("/", 1)[-1]


def result_version(result: SynthesisResult) -> int:
    """The job version a result answers (1 for requests written before versions)."""
    return (result.job.version if result.job else None) or 1


def needs_opening(state: JobState | None, result: SynthesisResult) -> bool:
    """Whether `result` starts a job version the table does not hold yet: then the caller
    reads that version's manifest and seeds the state with `open_version` before merging."""
    if result.job is None:
        return False
    version = result_version(result)
    if state is None:
        return version > 1
    return state.emitted and version > state.version


def open_version(job_id: str, version: int, manifest: JobManifest | None,
                 now: float, tenant: str | None = None) -> JobState | None:
    """A fresh state for revision `version`, holding the clips its manifest carries over;
    None when there is no usable manifest (the merge then opens an empty state)."""
    if manifest is None or manifest.job_id != job_id or manifest.version != version:
        return None
    clips = {c.index: ClipState(request_id=c.request_id, voice_id=c.voice_id,
                                status=c.status, audio=c.audio, error=c.error, text=c.text,
                                version=c.version or 1)
             for c in manifest.carried if 0 <= c.index < manifest.total}
    return JobState(job_id=job_id, total=manifest.total, first_seen=now, last_seen=now,
                    clips=clips, version=version, tenant=record_tenant(tenant))


def ready(state: JobState, now: float, timeout_s: float, not_before: float = 0.0) -> bool:
    """Whether the job should be closed now: complete, or silent for `timeout_s`.

    `not_before` is when this aggregator started: after a restart the results that arrived
    while it was down are still being read, so silence is counted from then at the earliest.
    """
    if state.emitted:
        return False
    if state.complete:
        return True
    return now - max(state.last_seen, not_before) >= timeout_s


def job_status(state: JobState) -> JobStatus:
    """succeeded: every line has audio; failed: none has (all cancelled included); else
    partial."""
    succeeded = sum(1 for c in state.clips.values() if c.status == "succeeded")
    if succeeded == state.total:
        return "succeeded"
    return "failed" if succeeded == 0 else "partial"


def clip_texts(state: JobState, manifest: JobManifest | None) -> dict[int, str]:
    """Each line's text: the script's where there is one, else the result's metadata.text."""
    texts = {i: c.text for i, c in state.clips.items() if c.text}
    if manifest is not None:
        texts.update({line.index: line.text for line in manifest.lines})
    return texts


def build_job(state: JobState, *, manifest: JobManifest | None, gap_ms: int,
              completed_at: str, subtitles: str | None = None,
              track: AudioRef | None = None) -> JobCompleted:
    """The job event: clips in index order; the timeline holds the clips that have audio,
    `gap_ms` apart (and says so in the event's `gap_ms`)."""
    texts = clip_texts(state, manifest)
    clips = [JobClip(index=i, request_id=c.request_id, voice_id=c.voice_id,
                     text=texts.get(i, ""), status=c.status,
                     duration_s=c.audio.duration_s if c.audio else 0.0,
                     audio=c.audio, error=c.error, version=c.version)
             for i, c in sorted(state.clips.items())]
    timeline = lay_out([(c.index, c.duration_s) for c in clips if c.audio is not None],
                       gap_ms / 1000)
    return JobCompleted(job_id=state.job_id, status=job_status(state), total=state.total,
                        clips=clips, timeline=timeline, completed_at=completed_at,
                        duration_s=timeline[-1].end_s if timeline else 0.0,
                        subtitles=subtitles, track=track, gap_ms=gap_ms,
                        version=state.version, tenant=state.tenant,
                        missing=[i for i in range(state.total) if i not in state.clips])


def emitted_marker(state: JobState, status: JobStatus, now: float) -> JobState:
    """What the table keeps once the event is out: enough to ignore late duplicates."""
    return JobState(job_id=state.job_id, total=state.total, first_seen=state.first_seen,
                    last_seen=state.last_seen, emitted=True, emitted_at=now, status=status,
                    version=state.version, tenant=state.tenant)
