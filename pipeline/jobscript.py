"""A job's script and manifest: what `job run`, POST /v1/jobs and the aggregator share.

    document (a parsed YAML/JSON script) --parse_script--> for each line: `_request`
      (the worker's own request rules, via decode_request) -> SynthesisRequest with
      `job: {id, index, total}` and request ID `{job_id}-{index:04d}`
      + JobManifest (texts and each line's other request fields, gap, concat, track
        format) -> `encode_manifest` -> `jobs/{job_id}/script.json`
    the aggregator and the gateway: script.json -> `decode_manifest` -> JobManifest

Pure: no file, no store, no Kafka. Reading a script file is consumers/clients/scripts.py's.
A bad line fails here, with the source, line and rule in the message (`ScriptError`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec
import orjson

from topics.errors import LocalError, VoiceFactoryError
from topics.events import JobClip, SynthesisRequest
from topics.validation import REQUEST_ID_MAX, check_id, decode_request

MANIFEST_SCHEMA = "vf.job-script.v1"
_LINE_KEYS = {"voice", "text", "instruct", "language", "format", "sample_rate", "speed",
              "metadata", "mode"}
_TOP_KEYS = {"job_id", "lines", "gap_ms", "concat", "track_format", "language", "format",
             "voice"}
FORMATS = ("wav", "flac", "mp3", "opus")
# Request fields that are not a line's content: the ID, job ref and owner change per version
# or come from the caller, never from the script.
_NOT_CONTENT = {"schema", "request_id", "voice_id", "text", "job", "tenant"}


class ManifestLine(msgspec.Struct, omit_defaults=True, kw_only=True):
    index: int
    request_id: str
    voice_id: str
    text: str
    # The line's other request fields (language, format, instruct, ...), so that a revision
    # can tell a changed line from an unchanged one and re-produce a line exactly. None in
    # manifests written before revisions existed.
    options: dict[str, Any] | None = None


class JobManifest(msgspec.Struct, omit_defaults=True, kw_only=True):
    """`jobs/{job_id}/script.json` (version N >= 2: `jobs/{job_id}/v{N}/script.json`):
    written by `job run` before it produces the requests. A revision's manifest names the
    version it revises (`base_version`) and carries that version's clips for the lines it
    does not re-produce (`carried`), so the aggregator can close it from them."""

    job_id: str
    total: int
    lines: list[ManifestLine]
    created_at: str
    schema: str = MANIFEST_SCHEMA
    gap_ms: int | None = None  # None: the aggregator's VF_JOB_GAP_MS
    concat: bool = False
    track_format: Literal["wav", "flac", "mp3", "opus"] = "wav"
    version: int = 1
    base_version: int | None = None
    carried: list[JobClip] = msgspec.field(default_factory=list)


_encoder = msgspec.json.Encoder()
_manifest_decoder = msgspec.json.Decoder(JobManifest)


def encode_manifest(manifest: JobManifest) -> bytes:
    return _encoder.encode(manifest)


def decode_manifest(raw: bytes) -> JobManifest:
    return _manifest_decoder.decode(raw)


class ScriptError(LocalError):
    """The script cannot become a job; the message names the file, line and rule."""


@dataclass(frozen=True)
class Script:
    job_id: str
    requests: list[SynthesisRequest]
    manifest: JobManifest


def line_options(request: SynthesisRequest) -> dict[str, Any]:
    """A request's content besides voice and text (language, format, ...), as JSON values:
    what the manifest keeps so that a revision can compare a line and produce it again."""
    built: dict[str, Any] = msgspec.to_builtins(request)
    return {k: v for k, v in built.items() if k not in _NOT_CONTENT}


def request_id_for(job_id: str, index: int) -> str:
    return f"{job_id}-{index:04d}"


def parse_script(doc: Any, *, source: str = "script", concat: bool | None = None) -> Script:
    if not isinstance(doc, dict):
        raise ScriptError(f"{source}: expected a mapping with job_id and lines")
    unknown = sorted(set(doc) - _TOP_KEYS)
    if unknown:
        raise ScriptError(f"{source}: unknown keys {unknown}; allowed: {sorted(_TOP_KEYS)}")
    job_id = doc.get("job_id")
    if not isinstance(job_id, str):
        raise ScriptError(f"{source}: job_id is required (a string)")
    try:
        check_id("job_id", job_id, REQUEST_ID_MAX - 5)  # room for "-0000"
    except ValueError as exc:
        raise ScriptError(f"{source}: {exc}") from None
    lines = doc.get("lines")
    if not isinstance(lines, list) or not lines:
        raise ScriptError(f"{source}: lines must be a non-empty list")
    if len(lines) > 10_000:
        raise ScriptError(f"{source}: {len(lines)} lines; a job holds at most 10000")
    gap_ms = _optional_int(doc, "gap_ms", source)
    track_format = doc.get("track_format", "wav")
    if track_format not in FORMATS:
        raise ScriptError(f"{source}: track_format {track_format!r} is not one of {FORMATS}")
    use_concat = bool(doc.get("concat", False)) if concat is None else concat
    requests = [_request(job_id, i, line, doc, len(lines), source)
                for i, line in enumerate(lines)]
    manifest = JobManifest(
        job_id=job_id, total=len(requests), gap_ms=gap_ms, concat=use_concat,
        track_format=track_format, created_at=_now(),
        lines=[ManifestLine(index=i, request_id=r.request_id, voice_id=r.voice_id, text=r.text,
                            options=line_options(r))
               for i, r in enumerate(requests)])
    return Script(job_id=job_id, requests=requests, manifest=manifest)


def _request(job_id: str, index: int, line: Any, doc: dict[str, Any], total: int,
             source: str) -> SynthesisRequest:
    where = f"{source}: line {index + 1}"
    if not isinstance(line, dict):
        raise ScriptError(f"{where}: expected a mapping with voice and text")
    unknown = sorted(set(line) - _LINE_KEYS)
    if unknown:
        raise ScriptError(f"{where}: unknown keys {unknown}; allowed: {sorted(_LINE_KEYS)}")
    voice = line.get("voice", doc.get("voice"))
    if not isinstance(voice, str) or not isinstance(line.get("text"), str):
        raise ScriptError(f"{where}: voice and text are required strings")
    obj: dict[str, Any] = {
        "request_id": request_id_for(job_id, index), "voice_id": voice, "text": line["text"],
        "job": {"id": job_id, "index": index, "total": total}}
    for name in ("instruct", "language", "format", "sample_rate", "speed", "metadata", "mode"):
        value = line.get(name, doc.get(name) if name in ("language", "format") else None)
        if value is not None:
            obj[name] = value
    try:
        return decode_request(orjson.dumps(obj))
    except VoiceFactoryError as exc:
        raise ScriptError(f"{where}: {exc.message}") from None


def _optional_int(doc: dict[str, Any], name: str, source: str) -> int | None:
    value = doc.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ScriptError(f"{source}: {name} must be a whole number >= 0, got {value!r}")
    return value


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
