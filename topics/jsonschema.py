"""JSON Schema (draft 2020-12) for the v1 records, generated from the msgspec structs.

Flow: a struct of `topics.events` (or `topics.fleet.WorkerStatus`) -> `msgspec.json.schema`
-> its root definition inlined at the top with `$schema`, `$id` and the record's `schema`
name as a constant -> the rules that msgspec types cannot express (ID charset and length,
speed range, sample rates, the closed error-code set, a cancel's single target) added from
`topics.validation` and `topics.errors` -> one file per record,
`topics/schemas/<schema name>.json`, checked in. `python -m topics.jsonschema [DIR]`
rewrites them; a unit test fails when the checked-in files drift from the structs.

The schemas describe what a producer may send; `topics.validation.decode_request` stays
the authority (some rules, such as text length after whitespace normalisation, metadata
size or job index < total, cannot be written in JSON Schema and are only described).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from topics.errors import ErrorCode
from topics.events import (
    AUDIT_ACTIONS,
    AUDIT_SCHEMA,
    CONTROL_SCHEMA,
    DLQ_SCHEMA,
    JOB_SCHEMA,
    REQUEST_SCHEMA,
    RESULT_SCHEMA,
    VOICE_SCHEMA,
    AuditEvent,
    ControlCommand,
    DeadLetter,
    JobCompleted,
    SynthesisRequest,
    SynthesisResult,
    VoiceRegistration,
)
from topics.fleet import FLEET_SCHEMA, MAX_HOT_VOICES, MAX_SHARD, STALE_INTERVALS, WorkerStatus
from topics.validation import (
    MAX_METADATA_BYTES,
    MAX_TEXT_CHARS,
    REQUEST_ID_MAX,
    SAMPLE_RATES,
    VOICE_ID_MAX,
)

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"

# `check_id` as a regular expression that means the same in Python's `re` and ECMA-262:
# not ".", no "..", no newline (Python's `$` would accept one trailing "\n"), the charset.
ID_PATTERN = r"^(?!\.$)(?!.*\.\.)(?!.*\n)[A-Za-z0-9._:-]+$"
SHA256_PATTERN = r"^[0-9a-f]{64}$"
S3_URI_PATTERN = r"^s3://[^/\s]+/\S+$"


EVENTS: dict[str, type[msgspec.Struct]] = {
    REQUEST_SCHEMA: SynthesisRequest,
    VOICE_SCHEMA: VoiceRegistration,
    RESULT_SCHEMA: SynthesisResult,
    JOB_SCHEMA: JobCompleted,
    DLQ_SCHEMA: DeadLetter,
    CONTROL_SCHEMA: ControlCommand,
    FLEET_SCHEMA: WorkerStatus,
    AUDIT_SCHEMA: AuditEvent,
}

_DESCRIPTIONS = {
    REQUEST_SCHEMA: "A synthesis request on tts.requests or tts.requests.interactive. The "
                    "record key is a routing key: the voice_id, or voice_id#<shard> (shard "
                    f"1-{MAX_SHARD}) when a router spreads a busy voice over partitions; "
                    "workers read the voice from this value, never from the key.",
    VOICE_SCHEMA: "A voice registration or update on the compacted tts.voices, keyed by "
                  "voice_id; a tombstone (null value) deletes the voice.",
    RESULT_SCHEMA: "The outcome of one request on tts.results, keyed by job.id, else "
                   "request_id. Deduplicate by request_id: delivery is at least once. A "
                   "rejected result with error.code request_id_reused answers a record that "
                   "reused the ID for another request: it never replaces the ID's answer.",
    JOB_SCHEMA: "A finished job on tts.jobs, keyed by job_id: its clips in index order, "
                "their timeline and subtitles.",
    DLQ_SCHEMA: "A message that could not be parsed or processed, on tts.dlq, keyed by the "
                "original key: the original bytes, headers and the reason.",
    CONTROL_SCHEMA: "A command on tts.control, keyed by the request_id or job_id it names: "
                    "cancel one request, or every line of a job not yet answered. Exactly "
                    "one of request_id and job_id is set; a command that breaks this is "
                    "logged and skipped by its readers.",
    AUDIT_SCHEMA: "One thing a tenant's API key, or an operator's CLI, did, on the "
                  "append-only tts.audit (kept 365 days, never compacted), keyed by tenant. "
                  "Never carries a key: key_id is the first 12 hex digits of its SHA-256. "
                  "Readers keep actions they do not know.",
    FLEET_SCHEMA: "A worker's status on the compacted tts.fleet, keyed by its worker ID and "
                  "rewritten every interval_ms: the partitions it owns in each request lane, "
                  "the work waiting for it there, the voices whose profiles it holds and "
                  "its profile cache and error counts since it started. "
                  f"Routers treat a status older than {STALE_INTERVALS} intervals as a worker "
                  "gone; a tombstone (null value) says it stopped.",
}

_ID_DESCRIPTION = "characters [A-Za-z0-9._:-], no '..', not '.'"

# Rules over several fields, added to the root of an event's schema.
_ROOT_RULES: dict[str, dict[str, Any]] = {
    # topics.control: a cancel names exactly one target (a null one counts as absent).
    CONTROL_SCHEMA: {"oneOf": [
        {"required": [target], "properties": {target: {"type": "string"}}}
        for target in ("request_id", "job_id")]},
}

# (definition title, property) -> keywords added to the property (to its non-null branch
# where the field is optional).
_CONSTRAINTS: dict[tuple[str, str], dict[str, Any]] = {
    ("SynthesisRequest", "request_id"): {
        "minLength": 1, "maxLength": REQUEST_ID_MAX, "pattern": ID_PATTERN,
        "description": "client idempotency key: a record with a request_id already used "
                       "for another request (other voice_id, reference, text, mode, "
                       "instruct, language, format, sample_rate or speed) is answered "
                       "rejected, request_id_reused; an identical one is answered from the "
                       f"stored audio; {_ID_DESCRIPTION}",
    },
    ("SynthesisRequest", "voice_id"): {
        "minLength": 1, "maxLength": VOICE_ID_MAX, "pattern": ID_PATTERN,
        "description": "registered voice; the record key is this ID, or this ID#<shard> "
                       f"(a routing key); {_ID_DESCRIPTION}",
    },
    ("SynthesisRequest", "text"): {
        "minLength": 1,
        "description": f"at most {MAX_TEXT_CHARS:,} characters after runs of whitespace are "
                       "collapsed to one space; not only whitespace",
    },
    ("SynthesisRequest", "instruct"): {
        "description": "natural-language style or dialect instruction, e.g. 用四川话说这句话",
    },
    ("SynthesisRequest", "language"): {"description": "BCP-47 or dialect tag"},
    ("SynthesisRequest", "sample_rate"): {
        "enum": list(SAMPLE_RATES), "description": "default: the engine's native rate",
    },
    ("SynthesisRequest", "speed"): {"minimum": 0.5, "maximum": 2.0},
    ("SynthesisRequest", "deadline"): {
        "format": "date-time",
        "description": "RFC 3339 with a UTC offset; past it the request is answered expired",
    },
    ("SynthesisRequest", "metadata"): {
        "description": f"echoed back untouched; at most {MAX_METADATA_BYTES:,} bytes as JSON",
    },
    ("JobRef", "id"): {
        "minLength": 1, "maxLength": REQUEST_ID_MAX, "pattern": ID_PATTERN,
        "description": f"job the request belongs to, key of tts.results; {_ID_DESCRIPTION}",
    },
    ("JobRef", "index"): {"minimum": 0, "description": "0-based, less than total"},
    ("JobRef", "total"): {"minimum": 1},
    ("JobRef", "version"): {
        "minimum": 1, "description": "the job's revision this request belongs to; absent: 1",
    },
    ("VoiceRegistration", "voice_id"): {
        "minLength": 1, "maxLength": VOICE_ID_MAX, "pattern": ID_PATTERN,
    },
    ("VoiceRegistration", "reference"): {
        "pattern": S3_URI_PATTERN, "description": "s3://bucket/key of the reference clip",
    },
    ("VoiceRegistration", "sha256"): {
        "pattern": SHA256_PATTERN, "description": "hex SHA-256 of the reference bytes",
    },
    ("VoiceRegistration", "created_at"): {"format": "date-time"},
    ("VoiceRegistration", "prompt_text"): {"description": "transcript of the reference"},
    ("AudioRef", "format"): {"enum": ["flac", "mp3", "opus", "wav"]},
    ("AudioRef", "sample_rate"): {"minimum": 1},
    ("AudioRef", "duration_s"): {"minimum": 0},
    ("AudioRef", "bytes"): {"minimum": 0},
    ("AudioRef", "sha256"): {"pattern": SHA256_PATTERN},
    ("ErrorInfo", "code"): {"enum": [code.value for code in ErrorCode]},
    ("SynthesisResult", "completed_at"): {"format": "date-time"},
    ("SynthesisResult", "attempt"): {"minimum": 1},
    ("SynthesisResult", "rtf"): {"minimum": 0, "description": "real-time factor"},
    ("SynthesisResult", "timings_ms"): {
        "additionalProperties": {"type": "number", "minimum": 0},
        "description": "queued, profile, synthesis, encode, upload, total",
    },
    ("JobCompleted", "job_id"): {
        "minLength": 1, "maxLength": REQUEST_ID_MAX, "pattern": ID_PATTERN,
    },
    ("JobCompleted", "total"): {"minimum": 1},
    ("JobCompleted", "completed_at"): {"format": "date-time"},
    ("JobCompleted", "subtitles"): {
        "pattern": S3_URI_PATTERN, "description": "s3:// key of the job's .srt",
    },
    ("JobCompleted", "clips"): {"description": "in index order"},
    ("JobCompleted", "timeline"): {
        "description": "answered clips with audio laid end to end with the job's gap, in index "
                       "order; the subtitles' cue times",
    },
    ("JobCompleted", "missing"): {
        "description": "indices never answered before the job's timeout; a line answered "
                       "failed, rejected, expired or cancelled is in clips, not here",
    },
    ("JobCompleted", "status"): {
        "description": "succeeded: every line succeeded; failed: none did; partial: some "
                       "did (the rest failed, were rejected, expired, cancelled or missing)",
    },
    ("JobCompleted", "subtitles_url"): {
        "description": "presigned GET URL of the .srt (valid VF_PRESIGN_SECONDS, as clips' "
                       "url)",
    },
    ("JobCompleted", "subtitles_vtt"): {
        "pattern": S3_URI_PATTERN, "description": "s3:// key of the same cues as WebVTT",
    },
    ("JobCompleted", "subtitles_vtt_url"): {"description": "presigned GET URL of the .vtt"},
    ("JobCompleted", "gap_ms"): {
        "minimum": 0, "description": "silence between neighbouring clips on the timeline",
    },
    ("Quality", "loudness_lufs"): {
        "description": "integrated loudness (ITU-R BS.1770) of the delivered audio, after "
                       "normalisation to VF_LOUDNESS_LUFS",
    },
    ("Quality", "loudness_input_lufs"): {
        "description": "integrated loudness of the engine's output before normalisation",
    },
    ("JobCompleted", "track"): {
        "description": "the whole job as one audio object (scripts with concat)",
    },
    ("JobClip", "index"): {"minimum": 0},
    ("JobClip", "version"): {
        "minimum": 1, "description": "the job version whose request produced this clip; "
                                     "lower than the event's version when carried over",
    },
    ("JobCompleted", "version"): {
        "minimum": 1, "description": "a job keeps its ID across revisions, with one event "
                                     "per version; absent: 1",
    },
    ("ClipSpan", "index"): {"minimum": 0},
    ("ClipSpan", "start_s"): {"minimum": 0},
    ("ClipSpan", "end_s"): {"minimum": 0},
    ("DeadLetter", "partition"): {"minimum": 0},
    ("DeadLetter", "offset"): {"minimum": 0},
    ("DeadLetter", "failed_at"): {"format": "date-time"},
    ("DeadLetter", "key_b64"): {"contentEncoding": "base64",
                                "description": "the original key, base64; null when it had "
                                               "none or when `omitted` lists key"},
    ("DeadLetter", "value_b64"): {
        "contentEncoding": "base64",
        "description": "the original value bytes, base64; empty when the value was empty, "
                       "is kept at value_ref, or `omitted` lists value",
    },
    ("DeadLetter", "headers"): {
        "description": "the original headers in order: [name, base64 of the value], the "
                       "value null when the header's value was null; empty when `omitted` "
                       "lists headers",
    },
    ("DeadLetter", "value_bytes"): {"minimum": 0,
                                    "description": "size of the original value in bytes"},
    ("DeadLetter", "value_sha256"): {"pattern": SHA256_PATTERN,
                                     "description": "hex SHA-256 of the original value"},
    ("DeadLetter", "value_ref"): {
        "pattern": S3_URI_PATTERN,
        "description": "the object holding the original value bytes when they were too "
                       "large to carry inline: s3://<bucket>/dlq/<topic>/<partition>/"
                       "<offset>.bin",
    },
    ("DeadLetter", "value_prefix_b64"): {
        "contentEncoding": "base64",
        "description": "the value's first bytes (up to 64), base64, when value_b64 is empty",
    },
    ("DeadLetter", "omitted"): {
        "description": "parts of the original carried neither inline nor by reference "
                       "(too large for the record, or the store refused them)",
    },
    ("ControlCommand", "request_id"): {
        "minLength": 1, "maxLength": REQUEST_ID_MAX, "pattern": ID_PATTERN,
        "description": f"the request to cancel, also the record key; {_ID_DESCRIPTION}",
    },
    ("ControlCommand", "job_id"): {
        "minLength": 1, "maxLength": REQUEST_ID_MAX, "pattern": ID_PATTERN,
        "description": "the job whose unanswered lines to cancel, also the record key; "
                       f"{_ID_DESCRIPTION}",
    },
    ("ControlCommand", "requested_at"): {"format": "date-time"},
    ("ControlCommand", "reason"): {"description": "free text, for logs"},
    ("AuditEvent", "tenant"): {
        "minLength": 1, "maxLength": 64, "pattern": ID_PATTERN,
        "description": f"the tenant the action belongs to, also the record key; {_ID_DESCRIPTION}",
    },
    ("AuditEvent", "action"): {
        "pattern": r"^[a-z_]+\.[a-z_]+$",
        "description": "what was done; known: " + ", ".join(AUDIT_ACTIONS),
    },
    ("AuditEvent", "object"): {
        "minLength": 1, "maxLength": REQUEST_ID_MAX, "pattern": ID_PATTERN,
        "description": "the ID acted on: a voice, consent, job or key id",
    },
    ("AuditEvent", "time"): {"format": "date-time"},
    ("AuditEvent", "key_id"): {
        "pattern": r"^[0-9a-f]{12}$",
        "description": "the acting API key: the first 12 hex digits of its SHA-256; absent "
                       "when an operator's CLI acted",
    },
    ("AuditEvent", "client"): {
        "maxLength": 256,
        "description": "the caller's address as the gateway saw it, or cli:<user>@<host>",
    },
    ("AuditEvent", "request_id"): {
        "maxLength": REQUEST_ID_MAX,
        "description": "the HTTP request's X-Request-Id, when the caller sent one",
    },
    ("WorkerStatus", "worker"): {
        "minLength": 1, "description": "the worker's instance ID (VF_INSTANCE_ID), also the "
                                       "record key",
    },
    ("WorkerStatus", "at_ms"): {
        "minimum": 0, "description": "when the status was written, Unix epoch milliseconds",
    },
    ("WorkerStatus", "interval_ms"): {
        "minimum": 1, "description": "the next status comes within this many milliseconds "
                                     "(VF_FLEET_INTERVAL_MS)",
    },
    ("WorkerStatus", "lanes"): {
        "description": "by lane name: batch (tts.requests), interactive "
                       "(tts.requests.interactive)",
    },
    ("WorkerStatus", "hot"): {
        "maxItems": MAX_HOT_VOICES,
        "items": {"type": "string", "minLength": 1, "maxLength": VOICE_ID_MAX,
                  "pattern": ID_PATTERN},
        "description": "voices whose profiles the worker holds in memory",
    },
    ("WorkerStatus", "draining"): {
        "description": "the worker is stopping (SIGTERM): route nothing new to it",
    },
    ("WorkerStatus", "profiles"): {
        "description": "the worker's voice profile lookups since it started "
                       "(vf_profile_cache_total): hit in memory, loaded from the store, "
                       "or computed (miss); absent from workers of before",
    },
    ("WorkerStatus", "errors"): {
        "propertyNames": {"enum": [code.value for code in ErrorCode]},
        "additionalProperties": {"type": "integer", "minimum": 1},
        "maxProperties": len(ErrorCode),
        "description": "results the worker answered other than succeeded since it started, "
                       "by error code (codes with none are left out)",
    },
    ("ProfileCounts", "hit"): {"minimum": 0, "description": "found in the worker's memory"},
    ("ProfileCounts", "store"): {"minimum": 0,
                                 "description": "loaded from the object store"},
    ("ProfileCounts", "miss"): {"minimum": 0, "description": "computed from the reference"},
    ("LaneLoad", "partitions"): {
        "items": {"type": "integer", "minimum": 0},
        "description": "the plain lane topic's partitions this worker owns",
    },
    ("LaneLoad", "topic_partitions"): {
        "minimum": 0, "description": "the plain lane topic's partition count (0: not known yet)",
    },
    ("LaneLoad", "shards"): {
        "items": {"type": "integer", "minimum": 0},
        "description": "the lane's shard topic (tts.requests[.interactive].shards) partitions "
                       "this worker owns; routers send there once a live worker lists some",
    },
    ("LaneLoad", "shard_partitions"): {
        "minimum": 0, "description": "the shard topic's partition count (0: not known yet, or "
                                     "a worker of before)",
    },
    ("LaneLoad", "backlog"): {
        "minimum": 0, "description": "records on those partitions (both topics) not yet "
                                     "fetched",
    },
    ("LaneLoad", "queued"): {
        "minimum": 0, "description": "fetched, waiting in the worker's queue or for a retry",
    },
    ("LaneLoad", "inflight"): {
        "minimum": 0, "description": "taken and not answered yet: on the device or being "
                                     "published",
    },
    ("LaneLoad", "slots"): {
        "minimum": 1, "description": "device calls the lane may run at once",
    },
}


def event_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of the event called `name` (e.g. `tts.request.v1`)."""
    generated = msgspec.json.schema(EVENTS[name])
    defs: dict[str, Any] = generated["$defs"]
    root_name = generated["$ref"].rsplit("/", 1)[-1]
    root = defs.pop(root_name)
    for title, definition in [(root_name, root), *defs.items()]:
        for (owner, prop), keywords in _CONSTRAINTS.items():
            if owner == title and prop in definition["properties"]:
                _constrain(definition["properties"][prop], keywords)
    # Our writers always send `schema` (it is the msgspec tag); producers of requests may
    # omit it (the worker defaults it) but must not send another name.
    root["properties"]["schema"]["const"] = name
    if name == REQUEST_SCHEMA:
        root["required"] = [f for f in root.get("required", []) if f != "schema"]
    root.update(_ROOT_RULES.get(name, {}))
    out: dict[str, Any] = {
        "$schema": JSON_SCHEMA_DIALECT,
        "$id": f"urn:voicefactory:schema:{name}",
        **root,
        "title": name,
        "description": _DESCRIPTIONS[name] + " Unknown fields are allowed; readers ignore them.",
    }
    if defs:
        out["$defs"] = dict(sorted(defs.items()))
    return out


def render_schemas() -> dict[str, str]:
    """File name -> file content, for every event and the fleet status."""
    return {
        f"{name}.json": json.dumps(event_schema(name), indent=2, ensure_ascii=False) + "\n"
        for name in EVENTS
    }


def write_schemas(directory: Path | str = SCHEMA_DIR) -> list[Path]:
    """Write `<schema name>.json` for every event into `directory`; returns the paths."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for filename, content in render_schemas().items():
        path = target / filename
        path.write_text(content, encoding="utf-8")
        written.append(path)
    return written


def _constrain(prop: dict[str, Any], keywords: dict[str, Any]) -> None:
    target = prop
    branches = prop.get("anyOf")
    if branches is not None:
        # Optional field: the value rules go on the non-null branch, the description on top.
        target = next(b for b in branches if b.get("type") != "null")
    for key, value in keywords.items():
        (prop if key == "description" else target)[key] = value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m topics.jsonschema",
        description="Write the JSON Schema of every v1 record as <schema name>.json.")
    parser.add_argument("directory", nargs="?", type=Path, default=SCHEMA_DIR,
                        help=f"output folder (default: {SCHEMA_DIR})")
    args = parser.parse_args(argv)
    for path in write_schemas(args.directory):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
