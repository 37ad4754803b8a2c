"""A video script (YAML or JSON) -> a checked `Script`: one request per line, and the manifest.

    SCRIPT file --load_script--> document --parse_script--> for each line: `_request`
      (the worker's own request rules, via decode_request) -> SynthesisRequest with
      `job: {id, index, total}` and request ID `{job_id}-{index:04d}`
      + JobManifest (texts and each line's other request fields, gap, concat, track
        format) for `jobs/{job_id}/script.json`

A bad line fails here, with the file, line and rule in the message, before anything is
produced (`voicefactory job run` exits 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import orjson
import yaml

from consumers.aggregator.state import JobManifest, ManifestLine
from topics.errors import LocalError, VoiceFactoryError
from topics.events import SynthesisRequest
from topics.validation import REQUEST_ID_MAX, check_id, decode_request

_LINE_KEYS = {"voice", "text", "instruct", "language", "format", "sample_rate", "speed",
              "metadata", "mode"}
_TOP_KEYS = {"job_id", "lines", "gap_ms", "concat", "track_format", "language", "format",
             "voice"}
FORMATS = ("wav", "flac", "mp3", "opus")
# Request fields that are not a line's content: the ID and job ref change per version.
_NOT_CONTENT = {"schema", "request_id", "voice_id", "text", "job"}


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


def load_script(path: Path, *, concat: bool | None = None) -> Script:
    """Read and check a script; `concat` (the --concat flag) overrides the script's own."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScriptError(f"{path}: {exc.strerror or exc}") from None
    try:
        doc = orjson.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
        raise ScriptError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: "
                          f"{exc}") from None
    return parse_script(doc, source=str(path), concat=concat)


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
