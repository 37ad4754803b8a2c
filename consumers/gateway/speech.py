"""`POST /v1/audio/speech` bodies: OpenAI's fields checked in full before anything is produced.

JSON body -> `parse_speech` -> every field checked (a `BadField` names the field, the value
and the rule: the HTTP layer answers 400) -> annotations applied to the input -> the input
split into parts the request contract takes (<= 2,000 characters after whitespace
normalisation each; OpenAI allows 4,096) -> one `SynthesisRequest` per part, each run
through the worker's own `decode_request` rules -> a `SpeechOrder`. The voice's existence
is checked by the app against the registry (an I/O call) after this pure step.

Every request asks for `stream: true` and 24 kHz (`REQUEST_RATE`): the gateway reads its
answer only from chunk records on its own reply partition of tts.audio, never tts.results;
the stored object is WAV (the worker's cheapest format) and the gateway encodes the
response format itself.

`SpeechBody` is the body as a msgspec type: the OpenAPI document (consumers.gateway.openapi)
is generated from it, and every body the hand-written checks accept is converted to it
last, so nothing the published schema calls invalid is ever accepted.
"""

from __future__ import annotations

import math
import re
import uuid
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import msgspec

from pipeline.text import annotations as markup
from pipeline.text.language import CANTONESE_TAGS, ENGLISH_TAGS, MANDARIN_TAGS, normalise_tag
from topics.errors import VoiceFactoryError
from topics.events import SynthesisRequest, encode
from topics.jsonschema import ID_PATTERN
from topics.tenancy import record_tenant
from topics.validation import MAX_TEXT_CHARS, VOICE_ID_MAX, check_id, decode_request

MAX_INPUT_CHARS = 4096  # OpenAI's limit on `input`
MAX_INSTRUCTIONS_CHARS = 4096
MAX_MODEL_CHARS = 128
MAX_ANNOTATIONS = 256
SPEED_RANGE = (0.5, 2.0)  # what the engines honour (topics.validation); OpenAI's is 0.25-4.0
FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
STREAM_FORMATS = ("audio", "sse")
# Asked of the worker: OpenAI's pcm rate and CosyVoice's own, so `pcm` needs no encoder and
# the gateway can start ffmpeg for the other formats before the first chunk arrives.
REQUEST_RATE = 24_000
FIELDS = frozenset({"model", "input", "voice", "instructions", "response_format", "speed",
                    "stream_format", "language", "annotations"})

ResponseFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]

# Patterns that mean the same in Python's `re` (msgspec) and ECMA-262 (JSON Schema readers):
# whitespace spelled out as str.isspace() knows it (the two regex dialects' `\s` differ).
SPACE = r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NO_NUL = r"^[^\x00]*$"
SAYABLE = rf"^[^\x00]*[^\x00{SPACE}][^\x00]*$"  # something besides whitespace, and no NUL
# normalise_tag's rule: a 2-3 letter language and 1-8 character subtags (either case, `-` or
# `_`), or a known name such as "Mandarin"; (?!.*\n): Python's `$` takes a trailing newline.
_NAMES = sorted(t for t in MANDARIN_TAGS | CANTONESE_TAGS | ENGLISH_TAGS if "-" not in t
                and len(t) > 3)
LANGUAGE_PATTERN = (r"^(?!.*\n)(?:[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8})*|"
                    + "|".join("".join(f"[{c}{c.upper()}]" for c in name) for name in _NAMES)
                    + ")$")
# One bracketed annotation run and nothing else (pipeline.text.annotations' groups).
MARKUP_PATTERN = rf"^(?:\[[^\[\]{SPACE}]{{0,16}}\])+$"

VoiceId = Annotated[str, msgspec.Meta(
    min_length=1, max_length=VOICE_ID_MAX, pattern=ID_PATTERN,
    description="A registered voice ID: [A-Za-z0-9._:-], no '..'")]
LanguageTag = Annotated[str, msgspec.Meta(
    max_length=35, pattern=LANGUAGE_PATTERN,
    description="A BCP-47 tag (en, zh-CN, yue) or a known name (mandarin, cantonese, english)")]


class VoiceRef(msgspec.Struct, forbid_unknown_fields=True):
    """OpenAI's custom voice object."""

    id: VoiceId


class SpeechBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The body of POST /v1/audio/speech (OpenAI's fields and two extensions)."""

    model: Annotated[str, msgspec.Meta(max_length=MAX_MODEL_CHARS, pattern=NO_NUL)]
    input: Annotated[str, msgspec.Meta(
        max_length=MAX_INPUT_CHARS, pattern=SAYABLE,
        description="The text; parts over 2,000 characters are split at sentence ends")]
    voice: VoiceId | VoiceRef
    instructions: Annotated[str, msgspec.Meta(max_length=MAX_INSTRUCTIONS_CHARS,
                                              pattern=NO_NUL)] | None = None
    response_format: ResponseFormat = "mp3"
    speed: Annotated[float, msgspec.Meta(ge=SPEED_RANGE[0], le=SPEED_RANGE[1])] = 1.0
    stream_format: Literal["audio", "sse"] | None = None
    language: LanguageTag | None = None
    annotations: Annotated[dict[
        Annotated[str, msgspec.Meta(max_length=64, pattern=SAYABLE)],
        Annotated[str, msgspec.Meta(max_length=128, pattern=MARKUP_PATTERN)]],
        msgspec.Meta(max_length=MAX_ANNOTATIONS, description=(
            'word -> pronunciation markup: pinyin {"好": "[h][ào]"} or ARPAbet '
            '{"read": "[R][EH1][D]"}'))] | None = None


class BadField(ValueError):
    """A body field breaks a rule; the message names it (the 400's reason)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class SpeechOrder:
    model: str
    voice_id: str
    response_format: ResponseFormat
    stream_format: str | None  # None: the whole file in one response
    requests: list[SynthesisRequest]  # the input's parts, in order


def voice_of(value: object) -> str:
    """OpenAI's `voice`: a registered voice ID, or `{"id": ...}` (a custom voice)."""
    if isinstance(value, dict):
        if set(value) != {"id"}:
            raise BadField("voice", 'voice as an object is {"id": "<voice id>"} and nothing else')
        value = value["id"]
    if not isinstance(value, str):
        raise BadField("voice", "voice must be a voice ID string or {\"id\": \"<voice id>\"}")
    try:
        return check_id("voice", value, VOICE_ID_MAX)
    except ValueError as exc:
        raise BadField("voice", str(exc)) from None


def parse_speech(body: Any, *, tenant: str, request_id: str | None = None) -> SpeechOrder:
    if not isinstance(body, dict):
        raise BadField("body", "the body must be a JSON object")
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise BadField(unknown[0], f"unknown field(s) {unknown}; accepted: {sorted(FIELDS)}")
    model = _string(body, "model", MAX_MODEL_CHARS, required=True)
    text = _string(body, "input", MAX_INPUT_CHARS, required=True)
    assert model is not None and text is not None
    if not text.strip():
        raise BadField("input", "input is empty")
    if "voice" not in body:
        raise BadField("voice", "voice is required")
    voice_id = voice_of(body["voice"])
    instructions = _string(body, "instructions", MAX_INSTRUCTIONS_CHARS) or None
    response_format = body.get("response_format", "mp3")
    if response_format not in FORMATS:
        raise BadField("response_format", f"response_format {_show(response_format)} is not "
                                          f"one of {', '.join(FORMATS)}")
    stream_format = body.get("stream_format")
    if stream_format is not None and stream_format not in STREAM_FORMATS:
        raise BadField("stream_format", f"stream_format {_show(stream_format)} is not one of "
                                        f"{', '.join(STREAM_FORMATS)}")
    speed = _speed(body.get("speed", 1.0))
    language = _language(body.get("language"))
    text = apply_annotations(text, body.get("annotations"))
    conform(body)
    parts = split_input(text)
    base = request_id or f"gw-{uuid.uuid4().hex[:20]}"
    requests = []
    for i, part in enumerate(parts):
        request = SynthesisRequest(
            request_id=base if len(parts) == 1 else f"{base}-p{i}", voice_id=voice_id,
            text=part, instruct=instructions, language=language, format="wav", speed=speed,
            sample_rate=REQUEST_RATE, stream=True, tenant=record_tenant(tenant),
            metadata={"model": model, "tenant": tenant, "gateway_part": i,
                      "gateway_parts": len(parts)})
        try:  # the worker's own rules, so nothing the worker would reject is produced
            requests.append(decode_request(encode(request)))
        except VoiceFactoryError as exc:
            raise BadField("input", str(exc)) from None
    return SpeechOrder(model, voice_id, response_format, stream_format, requests)


_AT_FIELD = re.compile(r"at `\$\.([A-Za-z_]+)")


def conform(body: dict[str, Any]) -> SpeechBody:
    """The body as the published type; a body the checks above let through but the schema
    refuses is refused too (the field named from msgspec's `$.path`)."""
    try:
        return msgspec.convert(body, SpeechBody)
    except msgspec.ValidationError as exc:
        found = _AT_FIELD.search(str(exc))
        raise BadField(found.group(1) if found else "body", f"{exc} (see /openapi.json)") \
            from None


def _show(value: object) -> str:
    return repr(value)[:60]


def _string(body: dict[str, Any], name: str, limit: int, *, required: bool = False) -> str | None:
    if name not in body or body[name] is None:
        if required:
            raise BadField(name, f"{name} is required")
        return None
    value = body[name]
    if not isinstance(value, str):
        raise BadField(name, f"{name} must be a string, got {type(value).__name__}")
    if len(value) > limit:
        raise BadField(name, f"{name} has {len(value):,} characters, limit {limit:,}")
    if "\x00" in value:
        raise BadField(name, f"{name} contains a NUL character")
    return value


def _speed(value: object) -> float:
    low, high = SPEED_RANGE
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadField("speed", f"speed must be a number in {low}-{high}")
    if not math.isfinite(value) or not low <= value <= high:
        raise BadField("speed", f"speed {value} is outside {low}-{high}, the range the engines "
                                "allow (OpenAI's 0.25-4.0 is not supported beyond it)")
    return float(value)


def _language(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 35:
        raise BadField("language", "language must be a BCP-47 tag string (e.g. en, zh, yue)")
    try:
        normalise_tag(value)
    except VoiceFactoryError as exc:
        raise BadField("language", str(exc)) from None
    return value


def apply_annotations(text: str, annotations: object) -> str:
    """`annotations` ({"word": "[R][EH1][D]", "好": "[h][ào]"}): the pronunciation markup of
    pipeline.text.annotations written after each occurrence of the word in the input."""
    if annotations is None:
        return text
    if not isinstance(annotations, dict) or len(annotations) > MAX_ANNOTATIONS:
        raise BadField("annotations", "annotations must be an object of at most "
                                      f"{MAX_ANNOTATIONS} word -> markup entries")
    for word, note in annotations.items():
        if not isinstance(note, str) or not word.strip() or len(word) > 64 or len(note) > 128:
            raise BadField("annotations", f"annotation {_show(word)}: the word and its markup "
                                          "must be non-empty strings (64 and 128 chars at most)")
        try:
            found = markup.find(word + note)
        except VoiceFactoryError as exc:
            raise BadField("annotations", f"annotation {_show(word)}: {exc}") from None
        # Exactly one annotation that is the whole note: no text smuggled in beside it.
        if len(found) != 1 or (found[0].start, found[0].end) != (len(word), len(word + note)):
            raise BadField("annotations", f"annotation {_show(word)}: {_show(note)} is not one "
                                          "pinyin ([h][ào]) or ARPAbet ([R][EH1][D]) annotation")
        # Latin words match whole words only; Han characters have no word boundaries.
        edge = r"\b" if word[0].isascii() else ""
        # The markup as a literal replacement: \g<0> is the word, backslashes escaped.
        text = re.sub(f"{edge}{re.escape(word)}{edge}(?!\\[)",
                      "\\g<0>" + note.replace("\\", "\\\\"), text)
    return text


# Latin punctuation ends a sentence only before a space ("3.5" stays whole); CJK needs none.
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；…])\s*")


def split_input(text: str, limit: int = MAX_TEXT_CHARS) -> list[str]:
    """Whitespace-normalised input cut at sentence ends into parts of at most `limit`
    characters; a sentence longer than that is cut at its last space (or hard) before it."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return [text]
    pieces: list[str] = []
    for sentence in (s.strip() for s in _SENTENCE_END.split(text)):
        while len(sentence) > limit:
            cut = sentence.rfind(" ", 0, limit + 1)
            cut = cut if cut > 0 else limit
            pieces.append(sentence[:cut].strip())
            sentence = sentence[cut:].strip()
        if sentence:
            pieces.append(sentence)
    parts: list[str] = []
    for piece in pieces:
        if parts and len(parts[-1]) + 1 + len(piece) <= limit:
            parts[-1] = f"{parts[-1]} {piece}"
        else:
            parts.append(piece)
    return parts
