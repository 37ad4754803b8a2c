"""Generated Kafka records for the fuzz suite: what a producer in any language might write.

    strategies(kind) (hypothesis: request lanes, tts.voices, tts.control, tts.results)
        --draw(strategy, n, seed)--> n Drafts (the test run n times, generate phase only)
        + edge_drafts(kind): the cases every run has (broker limit, tombstones, headers, ...)
        --render(draft, ...)--> FuzzRecord: key, value, headers, timestamp, over_limit
    expected_request_id(value): the request ID a worker answers a request-lane record with,
        None when its bytes belong in the DLQ (DESIGN.md "Events": parsed far enough to name
        its request -> a result; not -> tts.dlq)

Drafts are small, so that hypothesis can draw them; placeholders are filled in by render():
RID (a request ID of its own per record), VOICE (the registered voice), JOB (a job ID of its
own), PAD (that many characters, or up to just under or just over the broker's limit) and
DEEP (arrays nested that deep). Used by tests/integration/test_fuzz_topics.py (CI size) and
`voicefactory bench fuzz` (bench/fuzz.py, larger); `exclude` leaves out named features
(FEATURES) to see past a known bug.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import orjson
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from topics.validation import REQUEST_ID_MAX, check_id

TopicKind = Literal["requests", "interactive", "voices", "control", "results"]
KINDS: tuple[TopicKind, ...] = ("requests", "interactive", "voices", "control", "results")
LANES: tuple[TopicKind, ...] = ("requests", "interactive")

RID, VOICE, JOB = "@@fz-rid@@", "@@fz-voice@@", "@@fz-job@@"
PAD, DEEP = "@@fz-pad@@", "@@fz-deep@@"
UNDER, OVER = -1, -2  # Draft.pad: up to just under the broker's limit / just over it
# Record batch and record framing besides key, value and headers (61 + ~30 bytes), with room.
FRAMING_BYTES = 256
# What `exclude` can leave out (VF_FUZZ_EXCLUDE): null header values, values just under the
# limit (all, or those of records without a usable request ID: their bytes go to the DLQ),
# nesting past 100 levels, headers of 10 KB and more, keys of 10 KB and more; and the run's
# one request ID sent twice with two texts (bench/fuzzcheck.py).
FEATURES = ("null_header", "near_limit", "near_limit_dlq", "deep", "large_headers", "huge_key",
            "reused_id")

REQUEST_FIELDS = ("request_id", "voice_id", "text", "mode", "instruct", "language", "format",
                  "sample_rate", "speed", "deadline", "job", "metadata", "reference", "stream",
                  "schema")
KeyPlan = Literal["voice", "mismatch", "shard", "badshard", "huge"] | bytes | None


@dataclass(frozen=True)
class Draft:
    shape: str  # which generator made it: the figures count by shape
    body: Any = None  # a JSON-able object with placeholders, raw bytes, or None (tombstone)
    key: KeyPlan = "voice"
    headers: tuple[tuple[str, bytes | None], ...] = ()
    pad: int = 0  # characters for PAD (or bytes appended to a raw body); UNDER / OVER
    deep: int = 0  # levels for DEEP
    many_headers: int = 0  # this many small headers besides `headers`
    header_bytes: int = 0  # one header this large
    timestamp_ms: int | None = None

    def features(self) -> set[str]:
        found = set()
        if any(v is None for _, v in self.headers):
            found.add("null_header")
        if self.pad == UNDER:
            found.add("near_limit")
            named = isinstance(self.body, dict) and self.body.get("request_id") == RID
            if not named:
                found.add("near_limit_dlq")
        if self.deep > 100:
            found.add("deep")
        if self.header_bytes >= 10_000 or self.many_headers >= 500:
            found.add("large_headers")
        if self.key == "huge":
            found.add("huge_key")
        return found


@dataclass(frozen=True)
class FuzzRecord:
    kind: TopicKind
    shape: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp_ms: int | None = None
    over_limit: bool = False  # the broker must refuse it
    partition: int | None = None  # None: the producer's partitioner (sentinels name theirs)

    @property
    def must_refuse(self) -> str | None:
        """Why the broker must refuse this record: over its size limit, or no key on a
        compacted topic (tts.voices); None: it must take it."""
        if self.over_limit:
            return "MessageSizeTooLarge"
        if self.kind == "voices" and self.key is None:
            return "Error"  # the broker's "compacted topic cannot accept a null key"
        return None

    @property
    def size(self) -> int:
        """Key, value and headers: what counts against the broker's limit, framing aside."""
        return (len(self.key or b"") + len(self.value or b"")
                + sum(len(k) + len(v or b"") for k, v in self.headers))


class Ids:
    """Fresh request and job IDs for one run: `fz-<tag>-00001`, `fzj-<tag>-00001`."""

    def __init__(self, tag: str | None = None) -> None:
        self.tag = tag or uuid.uuid4().hex[:6]
        self._n = itertools.count(1)

    def request(self) -> str:
        return f"fz-{self.tag}-{next(self._n):05d}"

    def job(self) -> str:
        return f"fzj-{self.tag}-{next(self._n):05d}"


# -- rendering -------------------------------------------------------------------------------

def render(draft: Draft, kind: TopicKind, *, ids: Ids, voice: str, limit: int) -> FuzzRecord:
    """The record a draft stands for; `limit`: the topic's max.message.bytes."""
    headers = list(draft.headers)
    headers += [(f"fz-h{i:04d}", b"v" * 8) for i in range(draft.many_headers)]
    if draft.header_bytes:
        headers.append(("fz-large", b"h" * draft.header_bytes))
    rid, job = ids.request(), ids.job()
    key = _key(draft, voice)
    value = _value(draft.body, voice=voice, rid=rid, job=job, deep=draft.deep)
    if key is None and value is None:
        key = b""  # aiokafka sends no record without either; an empty key is the nearest
    if value is not None and draft.pad:
        base = value.replace(b'"' + PAD.encode() + b'"', b'""')
        pad = draft.pad
        if pad in (UNDER, OVER):
            framing = FRAMING_BYTES + len(key or b"") + sum(
                len(k) + len(v or b"") + 10 for k, v in headers)
            # just under: every byte but the framing; just over: the value alone is past it
            pad = limit - framing - len(base) if pad == UNDER else limit + 1 - len(base)
        value = _padded(value, max(0, pad))
    return FuzzRecord(kind=kind, shape=draft.shape, key=key, value=value, headers=headers,
                      timestamp_ms=draft.timestamp_ms, over_limit=draft.pad == OVER)


def _value(body: Any, *, voice: str, rid: str, job: str, deep: int) -> bytes | None:
    if body is None:
        return None
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    for placeholder, text in ((RID, rid), (VOICE, voice), (JOB, job)):
        raw = raw.replace(placeholder.encode(), text.encode())
    if deep:
        raw = raw.replace(b'"' + DEEP.encode() + b'"', b"[" * deep + b"]" * deep)
    return raw


def _padded(value: bytes, n: int) -> bytes:
    quoted = b'"' + PAD.encode() + b'"'
    if quoted in value:
        return value.replace(quoted, b'"' + b"x" * n + b'"', 1)
    return value + b"~" * n  # a raw body: filler after it


def _key(draft: Draft, voice: str) -> bytes | None:
    plan = draft.key
    if plan is None or isinstance(plan, bytes):
        return plan
    body_voice = draft.body.get("voice_id") if isinstance(draft.body, dict) else None
    own = (voice if body_voice == VOICE else body_voice) if isinstance(body_voice, str) else voice
    return {"voice": own.encode(), "mismatch": b"someone-else", "shard": f"{own}#7".encode(),
            "badshard": f"{own}#123456".encode(), "huge": b"k" * 100_000}[plan]


def expected_request_id(value: bytes | None) -> str | None:
    """The request ID a worker must answer this request-lane record with (a result), or None
    (the DLQ): a UTF-8 JSON object whose `request_id` is a usable ID gets a result."""
    if value is None:
        return None
    try:
        obj = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    rid = obj.get("request_id") if isinstance(obj, dict) else None
    if not isinstance(rid, str):
        return None
    try:
        return check_id("request_id", rid, REQUEST_ID_MAX)
    except ValueError:
        return None


# -- drawing -------------------------------------------------------------------------------

def draw(strategy: st.SearchStrategy[Draft], n: int, seed_value: int) -> list[Draft]:
    """`n` drafts from `strategy`, reproducible from `seed_value`: hypothesis runs a collecting
    test n times (generate phase only: nothing fails, so nothing shrinks)."""
    found: list[Draft] = []

    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), print_blob=False)
    @seed(seed_value)
    @given(strategy)
    def collect(draft: Draft) -> None:
        found.append(draft)

    collect()
    return found[:n]


def drafts(kind: TopicKind, n: int, seed_value: int,
           exclude: Iterable[str] = ()) -> list[Draft]:
    """The run's drafts for one topic: the fixed edge cases, then `n` drawn ones (seeded by
    `seed_value` and the topic, so the two lanes differ); any with an excluded feature left
    out."""
    skip = set(exclude)
    unknown = skip - set(FEATURES)
    if unknown:
        raise ValueError(f"unknown fuzz features {sorted(unknown)}; known: {FEATURES}")
    drawn = draw(STRATEGIES[kind](), n, seed_value * len(KINDS) + KINDS.index(kind))
    every = edge_drafts(kind) + drawn
    return [d for d in every if not d.features() & skip]


# -- strategies ------------------------------------------------------------------------------

json_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=10)
bad_ids = st.sampled_from(["", ".", "..", "a/b", "a..b", "x" * 129, "有声", "with space",
                           "a\nb", "a\x00b", "../etc"]) | json_values.filter(
                               lambda v: not isinstance(v, str))
bad_bytes = st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xc0\xaf", b"\x00",
                             b"\xf4\x90\x80\x80", b"\xe2\x82"])
header_values = (st.binary(max_size=24) | st.sampled_from(  # a null value: 1 header in 12
    [None, b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01",
     b"00-" + b"0" * 32 + b"-" + b"0" * 16 + b"-00", b"\xff" * 55, b"ff-zz", b""]))
header_names = st.sampled_from(["traceparent", "vf-attempt", "vf-seq", "content-type", "",
                                "ключ", "x" * 200]) | st.text(max_size=12)
headers = st.lists(st.tuples(header_names, header_values), max_size=5).map(tuple)
_plans: list[KeyPlan] = ["voice", "voice", "voice", None, "mismatch", "shard", "badshard",
                         "huge"]
keys: st.SearchStrategy[KeyPlan] = st.sampled_from(_plans) | st.binary(max_size=40)
pads = st.sampled_from([2_000, 60_000, 300_000, UNDER])
depths = st.sampled_from([50, 253, 254, 255, 400, 1023, 1024, 1025, 50_000])
old_timestamps = st.sampled_from([None, None, None, None, 1, 86_400_000])


def _record(shape: str, body: st.SearchStrategy[Any]) -> st.SearchStrategy[Draft]:
    """A Draft of `body` with drawn key, headers, many/large headers and timestamp."""
    return st.builds(Draft, shape=st.just(shape), body=body, key=keys, headers=headers,
                     many_headers=st.sampled_from([0, 0, 0, 0, 60, 1500]),
                     header_bytes=st.sampled_from([0, 0, 0, 0, 300, 40_000, 250_000]),
                     timestamp_ms=old_timestamps)


def _mutated(base: st.SearchStrategy[dict[str, Any]], fields: tuple[str, ...],
             values: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """`base` with 1-3 of `fields` set to drawn `values`."""
    @st.composite
    def build(draw_: Callable[..., Any]) -> dict[str, Any]:
        obj = dict(draw_(base))
        for name in draw_(st.lists(st.sampled_from(fields), min_size=1, max_size=3,
                                   unique=True)):
            obj[name] = draw_(values)
        return obj
    return build()


def _padded_field(base: st.SearchStrategy[dict[str, Any]],
                  fields: tuple[str, ...]) -> st.SearchStrategy[tuple[dict[str, Any], int]]:
    """`base` with one of `fields` holding PAD, and the pad size."""
    @st.composite
    def build(draw_: Callable[..., Any]) -> tuple[dict[str, Any], int]:
        obj = dict(draw_(base))
        name = draw_(st.sampled_from(fields))
        obj[name] = {"blob": PAD} if name == "metadata" else PAD
        return obj, draw_(pads)
    return build()


def _huge(shape: str, base: st.SearchStrategy[dict[str, Any]],
          fields: tuple[str, ...]) -> st.SearchStrategy[Draft]:
    return st.builds(lambda pair, key: Draft(shape=shape, body=pair[0], pad=pair[1], key=key),
                     _padded_field(base, fields), keys)


def _raw_garbage(valid: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[bytes]:
    """Bytes that are not a UTF-8 JSON object: bad UTF-8 spliced into a valid one, a cut-off
    one, other encodings, trailing garbage, JSON5-isms, or random bytes."""
    @st.composite
    def build(draw_: Callable[..., Any]) -> bytes:
        text = orjson.dumps(draw_(valid))
        at = draw_(st.integers(min_value=0, max_value=len(text) - 1))
        how = draw_(st.sampled_from(["splice", "cut", "utf16", "bom", "trailing", "quotes",
                                     "nan", "binary", "empty"]))
        if how == "splice":
            return text[:at] + bytes(draw_(bad_bytes)) + text[at:]
        if how == "cut":
            return text[:at]
        if how == "utf16":
            return text.decode().encode("utf-16")
        if how == "bom":
            return b"\xef\xbb\xbf" + text
        if how == "trailing":
            return text + b"}}"
        if how == "quotes":
            return text.replace(b'"', b"'")
        if how == "nan":
            return text[:-1] + b', "speed": NaN}'
        if how == "binary":
            return b"\xff" + bytes(draw_(st.binary(max_size=64)))
        return b""
    return build()


def request_strategy() -> st.SearchStrategy[Draft]:
    voices = st.sampled_from([VOICE, VOICE, VOICE, "fz-nobody", "Voice.Unknown-1"])
    job = st.fixed_dictionaries({"id": st.just(JOB) | bad_ids,
                                 "index": st.integers(min_value=-2, max_value=5),
                                 "total": st.integers(min_value=-1, max_value=5)})
    valid = st.fixed_dictionaries(
        {"request_id": st.just(RID), "voice_id": voices, "text": st.text(min_size=1,
                                                                         max_size=60)},
        optional={"schema": st.just("tts.request.v1"),
                  "format": st.sampled_from(["wav", "flac", "mp3", "opus"]),
                  "sample_rate": st.sampled_from([16000, 24000, 48000, 22050]),
                  "speed": st.floats(min_value=0.5, max_value=2.0),
                  "language": st.sampled_from(["en", "zh", "yue", "xx-bogus"]),
                  "deadline": st.sampled_from(["2001-01-01T00:00:00Z", "2999-01-01T00:00:00Z"]),
                  "job": job, "metadata": st.dictionaries(st.text(max_size=8), json_values,
                                                          max_size=3),
                  "stream": st.booleans(), "mode": st.sampled_from(["zero_shot", "instruct"]),
                  "instruct": st.text(max_size=20), "x-future-field": json_values})
    schemas = st.sampled_from(["tts.request.v2", "tts.request.v0", "tts.request.v1.1",
                               "TTS.REQUEST.V1", "tts.result.v1", ""]) | json_values
    return st.one_of(
        _record("valid", valid),
        _record("wrong_types", _mutated(valid, REQUEST_FIELDS, json_values)),
        _record("unknown_schema", _mutated(valid, ("schema",), schemas)),
        _record("bad_ids", _mutated(valid, ("request_id", "voice_id"), bad_ids)),
        _record("bad_job", _mutated(valid, ("job",), json_values | job)),
        _record("non_object", json_values.filter(lambda v: not isinstance(v, dict))),
        _record("not_utf8_json", _raw_garbage(valid)),
        _record("object_of_anything", st.dictionaries(
            st.sampled_from(REQUEST_FIELDS) | st.text(max_size=10), json_values, max_size=8)),
        _record("deep", st.sampled_from([{"request_id": RID, "voice_id": VOICE, "text": "hi",
                                          "metadata": {"x": DEEP}}, DEEP])).flatmap(
            lambda d: depths.map(lambda n: replace(d, deep=n))),
        _huge("huge_field", valid, ("text", "instruct", "language", "schema", "format",
                                    "deadline", "mode", "metadata", "x-unknown", "voice_id",
                                    "reference")),
        _record("tombstone", st.none()),
        _record("fault", valid.map(lambda v: {**v, "voice_id": VOICE, "stream": False,
                                              "text": "fail [[bench:fail]]"})),
        _record("missing_id", _mutated(valid, ("request_id", "voice_id", "job"), st.none()).map(
            lambda v: {k: x for k, x in v.items() if x is not None})),
    )


def control_strategy() -> st.SearchStrategy[Draft]:
    base = st.fixed_dictionaries(
        {"schema": st.just("tts.control.v1"), "action": st.just("cancel")},
        optional={"request_id": st.just(RID) | bad_ids, "job_id": st.just(JOB) | bad_ids,
                  "reason": st.text(max_size=30), "requested_at": st.text(max_size=30)})
    fields = ("schema", "action", "request_id", "job_id", "reason", "requested_at")
    return st.one_of(
        _record("cancel", base),
        _record("wrong_types", _mutated(base, fields, json_values)),
        _record("unknown_schema", _mutated(base, ("schema", "action"), st.sampled_from(
            ["tts.control.v2", "pause", "CANCEL", ""]) | json_values)),
        _record("non_object", json_values.filter(lambda v: not isinstance(v, dict))),
        _record("not_utf8_json", _raw_garbage(base)),
        _record("deep", st.sampled_from([
            {"schema": "tts.control.v1", "action": "cancel", "request_id": RID, "reason": DEEP},
            {"schema": "tts.control.v1", "action": "cancel", "request_id": RID,
             "x-extra": DEEP}])).flatmap(
            lambda d: depths.map(lambda n: replace(d, deep=n))),
        _huge("huge_field", base.map(lambda v: {**v, "request_id": RID}),
              ("reason", "requested_at", "request_id", "x-unknown")),
        _record("tombstone", st.none()),
    )


def voice_strategy() -> st.SearchStrategy[Draft]:
    base = st.fixed_dictionaries(
        {"schema": st.just("tts.voice.v1"), "voice_id": st.sampled_from([VOICE, "fz-new"]),
         "reference": st.sampled_from(["s3://nowhere/ref.wav", "../../etc/passwd", ""]),
         "sha256": st.text(max_size=64), "created_at": st.text(max_size=25)},
        optional={"prompt_text": st.text(max_size=30), "language": st.text(max_size=8)})
    fields = ("schema", "voice_id", "reference", "sha256", "created_at", "prompt_text")
    return st.one_of(
        _record("registration", base),
        _record("wrong_types", _mutated(base, fields, json_values)),
        _record("non_object", json_values.filter(lambda v: not isinstance(v, dict))),
        _record("not_utf8_json", _raw_garbage(base)),
        _huge("huge_field", base, ("prompt_text", "reference", "x-unknown")),
        _record("tombstone", st.none()),  # a delete of the registered voice, among others
    )


def result_strategy() -> st.SearchStrategy[Draft]:
    statuses = st.sampled_from(["succeeded", "failed", "rejected", "expired", "cancelled",
                                "exploded"])
    durations = st.sampled_from([0.0, 1.5, -5.0, 1e20, 1e308, 1e400]) | st.floats(
        min_value=0.0, max_value=30.0)
    audio = st.fixed_dictionaries(
        {"bucket": st.just("b"), "key": st.just("audio/x.wav"), "url": st.just("http://x"),
         "format": st.just("wav"), "sample_rate": st.just(24000), "duration_s": durations,
         "bytes": st.integers(min_value=0, max_value=10), "sha256": st.just("0" * 64)})
    total = st.integers(min_value=-1, max_value=4) | st.sampled_from(
        [10_001, 2**31, 10**9, 2**62, 2**63 - 1])
    job = st.fixed_dictionaries({"id": st.just(JOB) | bad_ids,
                                 "index": st.integers(min_value=-2, max_value=4) | total,
                                 "total": total})
    base = st.fixed_dictionaries(
        {"schema": st.just("tts.result.v1"), "request_id": st.just(RID),
         "voice_id": st.just("v"), "status": statuses,
         "completed_at": st.just("2031-01-01T00:00:00Z"), "job": job},
        optional={"audio": audio, "metadata": st.dictionaries(
            st.sampled_from(["text", "x"]), json_values, max_size=2)})
    fields = ("schema", "request_id", "voice_id", "status", "job", "audio", "metadata",
              "timings_ms", "attempt")
    return st.one_of(
        _record("result", base),
        _record("wrong_types", _mutated(base, fields, json_values)),
        _record("unknown_schema", _mutated(base, ("schema",), st.sampled_from(
            ["tts.result.v2", "tts.request.v1", ""]) | json_values)),
        _record("non_object", json_values.filter(lambda v: not isinstance(v, dict))),
        _record("not_utf8_json", _raw_garbage(base)),
        _record("deep", st.just({"schema": "tts.result.v1", "request_id": RID,
                                 "voice_id": "v", "status": "succeeded", "completed_at": "x",
                                 "job": {"id": JOB, "index": 0, "total": 2},
                                 "metadata": {"x": DEEP}})).flatmap(
            lambda d: depths.map(lambda n: replace(d, deep=n))),
        _huge("huge_field", base, ("request_id", "voice_id", "metadata", "x-unknown")),
        _record("tombstone", st.none()),
    )


STRATEGIES: dict[TopicKind, Callable[[], st.SearchStrategy[Draft]]] = {
    "requests": request_strategy, "interactive": request_strategy,
    "voices": voice_strategy, "control": control_strategy, "results": result_strategy}


# -- the cases every run has -------------------------------------------------------------------

def _request(**fields: Any) -> dict[str, Any]:
    return {"request_id": RID, "voice_id": VOICE, "text": "An edge case.", **fields}


def edge_drafts(kind: TopicKind) -> list[Draft]:
    """Fixed cases, so that each run has them whatever hypothesis draws."""
    common = [
        Draft("tombstone", None), Draft("tombstone", None, key=None),
        Draft("not_utf8_json", b"\xff\xfe not json"), Draft("not_utf8_json", b""),
        Draft("near_limit", b"\xff", pad=UNDER),  # undecodable: its DLQ record is too big
        Draft("over_limit", b"\xff", pad=OVER),  # refused by the broker at produce time
        Draft("deep", DEEP, deep=100_000),
        Draft("large_headers", b"\xff", header_bytes=300_000),
        Draft("huge_key", b"\xff", key="huge"),
        Draft("null_header", b"\xff", headers=(("x-null", None),)),
    ]
    if kind in LANES:
        return [*common,
                Draft("near_limit", _request(text=PAD), pad=UNDER),  # text_too_long
                Draft("near_limit", _request(schema=PAD), pad=UNDER),  # quoted in the answer
                Draft("near_limit", _request(format=PAD), pad=UNDER),
                Draft("over_limit", _request(text=PAD), pad=OVER),
                Draft("deep", _request(metadata={"x": DEEP}), deep=300),
                Draft("deep", _request(**{"x-extra": DEEP}), deep=1000),
                Draft("large_headers", _request(), many_headers=2000),
                Draft("null_header", _request(), headers=(("traceparent", None),)),
                Draft("valid", _request(stream=True)),
                Draft("bad_ids", _request(stream=True, voice_id="..")),  # rejected, streamed
                Draft("valid", _request(deadline="2001-01-01T00:00:00Z")),  # expired
                Draft("valid", {"request_id": RID, "text": "Ad hoc.",  # an ad-hoc voice
                                "reference": "s3://elsewhere/../x.wav"}),
                Draft("fault", _request(text="fail [[bench:fail]]"))]
    if kind == "control":
        return [*common,
                Draft("deep", {"schema": "tts.control.v1", "action": "cancel",
                               "request_id": RID, "x-extra": DEEP}, deep=1000),
                Draft("cancel", {"schema": "tts.control.v1", "action": "cancel",
                                 "request_id": RID, "reason": PAD}, pad=UNDER),
                Draft("cancel", {"schema": "tts.control.v1", "action": "cancel",
                                 "request_id": RID}, timestamp_ms=1)]  # expired on arrival
    if kind == "voices":
        return common
    return [*common,  # results
            Draft("deep", {"schema": "tts.result.v1", "request_id": RID, "voice_id": "v",
                           "status": "succeeded", "completed_at": "x",
                           "job": {"id": JOB, "index": 0, "total": 2},
                           "metadata": {"x": DEEP}}, deep=1000),
            Draft("result", {"schema": "tts.result.v1", "request_id": RID, "voice_id": "v",
                             "status": "succeeded", "completed_at": "x",
                             "job": {"id": JOB, "index": 0, "total": 2**62}}),
            Draft("result", {"schema": "tts.result.v1", "request_id": RID, "voice_id": "v",
                             "status": "succeeded", "completed_at": "x",
                             "job": {"id": JOB, "index": 0, "total": 1},
                             "audio": {"bucket": "b", "key": "k", "url": "u", "format": "wav",
                                       "sample_rate": 1, "duration_s": 1e308, "bytes": 1,
                                       "sha256": "0"}})]
