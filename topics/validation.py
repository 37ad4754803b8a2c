"""Request decoding: raw Kafka bytes -> a validated `SynthesisRequest`, or a typed error.

Two kinds of bad input (DESIGN.md "Events"): bytes that are not a UTF-8 JSON object raise
`UndecodableMessage` (the worker sends them to the DLQ); a JSON object that breaks a rule
raises `InvalidRequest` with an error code and, where it could be read, the request and
voice IDs so that the worker can answer with a `rejected` result.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec
import orjson

from topics.errors import ErrorCode, InvalidRequest, UndecodableMessage
from topics.events import REQUEST_SCHEMA, SynthesisRequest

MAX_TEXT_CHARS = 2000
MAX_METADATA_BYTES = 4096
REQUEST_ID_MAX = 128
VOICE_ID_MAX = 64
_ID_RE = re.compile(r"[A-Za-z0-9._:-]+")


def check_id(field: str, value: str, limit: int) -> str:
    """IDs become parts of object keys: a strict charset, no `..`, bounded length."""
    if not value:
        raise ValueError(f"{field} is empty")
    if len(value) > limit:
        raise ValueError(f"{field} has {len(value)} characters, limit {limit}")
    if not _ID_RE.fullmatch(value):
        raise ValueError(f"{field} {value!r} has characters outside [A-Za-z0-9._:-]")
    if value == ".":
        raise ValueError(f"{field} is '.', which names a directory")
    if ".." in value:
        raise ValueError(f"{field} {value!r} contains '..'")
    return value


ADHOC_PREFIX = "adhoc-"


def decode_request(raw: bytes | None) -> SynthesisRequest:
    if raw is None:
        raise UndecodableMessage("message has no value (tombstone)")
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise UndecodableMessage(f"not UTF-8 JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise UndecodableMessage(f"expected a JSON object, got {type(obj).__name__}")
    request_id = _readable_id(obj, "request_id", REQUEST_ID_MAX)
    if "voice_id" not in obj and isinstance(obj.get("reference"), str):
        # An ad-hoc voice is named after its reference URL; the profile itself is keyed by
        # the clip's sha256, so one clip under two URLs is still profiled once.
        digest = hashlib.sha256(obj["reference"].encode()).hexdigest()[:16]
        obj["voice_id"] = ADHOC_PREFIX + digest
    voice_id = _readable_id(obj, "voice_id", VOICE_ID_MAX)

    def reject(code: ErrorCode, message: str) -> InvalidRequest:
        return InvalidRequest(code, message, request_id=request_id, voice_id=voice_id)

    schema = obj.get("schema", REQUEST_SCHEMA)
    if schema != REQUEST_SCHEMA:
        raise reject(ErrorCode.UNSUPPORTED_SCHEMA,
                     f"schema {schema!r}, expected {REQUEST_SCHEMA!r}")
    for name in ("request_id", "voice_id", "text"):
        if name not in obj:
            raise reject(ErrorCode.INVALID_REQUEST, f"{name} is required")
    try:
        request = msgspec.convert(obj, type=SynthesisRequest)
    except msgspec.ValidationError as exc:
        raise reject(ErrorCode.INVALID_REQUEST, str(exc)) from None
    _check_rules(request, reject)
    return request


def _readable_id(obj: dict[str, Any], field: str, limit: int) -> str | None:
    value = obj.get(field)
    if isinstance(value, str):
        try:
            return check_id(field, value, limit)
        except ValueError:
            return None
    return None


SAMPLE_RATES = (16000, 22050, 24000, 44100, 48000)
OPUS_RATES = (16000, 24000, 48000)  # of SAMPLE_RATES, those the Opus codec runs at


def _check_rules(request: SynthesisRequest,
                 reject: Callable[[ErrorCode, str], InvalidRequest]) -> None:
    """Each rule raises `reject(code, message)`; messages name the field, value and limit."""
    problem = _id_problem(request) or _field_problem(request)
    if problem is not None:
        raise reject(ErrorCode.INVALID_REQUEST, problem)
    text = " ".join(request.text.split())
    if not text:
        raise reject(ErrorCode.INVALID_REQUEST, "text is empty")
    if len(text) > MAX_TEXT_CHARS:
        raise reject(
            ErrorCode.TEXT_TOO_LONG,
            f"text has {len(text):,} characters after normalisation, limit {MAX_TEXT_CHARS:,}",
        )


def _id_problem(request: SynthesisRequest) -> str | None:
    checks = [("request_id", request.request_id, REQUEST_ID_MAX),
              ("voice_id", request.voice_id, VOICE_ID_MAX)]
    if request.job is not None:
        checks.append(("job.id", request.job.id, REQUEST_ID_MAX))
    for field, value, limit in checks:
        try:
            check_id(field, value, limit)
        except ValueError as exc:
            return str(exc)
    return None


def _field_problem(request: SynthesisRequest) -> str | None:
    if not 0.5 <= request.speed <= 2.0:
        return f"speed {request.speed} is outside 0.5-2.0"
    if request.sample_rate is not None and request.sample_rate not in SAMPLE_RATES:
        allowed = ", ".join(map(str, SAMPLE_RATES))
        return f"sample_rate {request.sample_rate} is not one of {allowed}"
    if (request.format == "opus" and request.sample_rate is not None
            and request.sample_rate not in OPUS_RATES):
        allowed = ", ".join(map(str, OPUS_RATES))
        return f"opus runs at {allowed} Hz only, not sample_rate {request.sample_rate}"
    if request.metadata is not None:
        try:
            size = len(orjson.dumps(request.metadata))
        except orjson.JSONEncodeError:  # orjson reads 1,024 levels but writes only 254
            return "metadata is nested more than 254 levels deep"
        if size > MAX_METADATA_BYTES:
            return f"metadata is {size:,} bytes as JSON, limit {MAX_METADATA_BYTES:,}"
    if request.deadline is not None and parse_deadline(request.deadline) is None:
        return f"deadline {request.deadline!r} is not an RFC 3339 time with a UTC offset"
    job = request.job
    if job is not None and (job.total < 1 or not 0 <= job.index < job.total):
        return f"job.index {job.index} must be in 0..{job.total - 1} (job.total {job.total})"
    if job is not None and job.version is not None and job.version < 1:
        return f"job.version must be >= 1, got {job.version}"
    return None


_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})")


def parse_deadline(value: str) -> datetime | None:
    """RFC 3339 only (Python's fromisoformat alone also takes week dates, `T00Z`, ...)."""
    if not _RFC3339.fullmatch(value):
        return None
    text = value[:-1] + "+00:00" if value[-1] in "Zz" else value
    frac = re.search(r"\.(\d+)", text)
    if frac and len(frac.group(1)) > 6:  # datetime keeps microseconds: trim nanoseconds
        text = text.replace(frac.group(0), "." + frac.group(1)[:6], 1)
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None
