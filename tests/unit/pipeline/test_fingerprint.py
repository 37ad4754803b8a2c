"""A request's fingerprint: what changes it (the fields that decide the audio) and what
does not (delivery, echo, defaults spelled out), and how a stored object compares."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from pipeline.fingerprint import (
    AUDIO_FIELDS,
    FIELDS_KEY,
    FINGERPRINT_KEY,
    Fingerprint,
    reuse_message,
)
from topics.events import JobRef, SynthesisRequest

BASE: dict[str, Any] = {"request_id": "r-1", "voice_id": "narrator", "text": "Hello there."}


def fp(**changes: Any) -> Fingerprint:
    return Fingerprint.of(SynthesisRequest(**{**BASE, **changes}))


# One other value for every field that decides the audio.
CHANGED: dict[str, Any] = {
    "voice_id": "grandma", "reference": "s3://b/clip.wav", "text": "Hello there!",
    "mode": "instruct", "instruct": "say it slowly", "language": "en", "format": "flac",
    "sample_rate": 16000, "speed": 1.25}


def test_every_audio_field_is_covered_by_a_case_here() -> None:
    assert set(CHANGED) == set(AUDIO_FIELDS)


@pytest.mark.parametrize("name", sorted(CHANGED))
def test_a_field_that_decides_the_audio_changes_it_and_is_named(name: str) -> None:
    other = fp(**{name: CHANGED[name]})
    assert other.value != fp().value
    assert other.changed(fp()) == [name]
    assert fp().differs_from(other.metadata()) == [name]


@pytest.mark.parametrize("changes", [
    {"request_id": "r-2"},
    {"deadline": "2031-01-01T00:00:00Z"},
    {"job": JobRef(id="ep1", index=2, total=3)},
    {"metadata": {"scene": 3}},
    {"stream": True},
    {"format": "wav"},  # the default, spelled out
    {"speed": 1},  # an integer 1 is the default 1.0
    {"mode": None, "language": None},
], ids=lambda c: ",".join(c))
def test_delivery_echo_and_spelled_out_defaults_do_not_change_it(changes: dict[str, Any]) -> None:
    assert fp(**changes) == fp()
    assert fp().differs_from(fp(**changes).metadata()) is None


def test_text_is_compared_exactly_as_sent() -> None:
    assert fp(text="Hello  there.").value != fp().value


def test_the_value_is_the_sha256_of_the_set_fields_as_sorted_compact_json() -> None:
    canonical = '{"speed":1.5,"text":"你好","voice_id":"narrator"}'.encode()
    got = fp(text="你好", speed=1.5).value
    assert got == "v1:" + hashlib.sha256(canonical).hexdigest()


def test_metadata_is_small_ascii_and_round_trips() -> None:
    full = fp(**{**CHANGED, "text": "长" * 2000})
    meta = full.metadata()
    assert set(meta) == {FINGERPRINT_KEY, FIELDS_KEY}
    assert all(v.isascii() for v in meta.values())
    assert sum(len(k) + len(v) for k, v in meta.items()) < 400  # S3 allows 2 KB in all
    assert full.differs_from(meta) is None


@pytest.mark.parametrize("stored", [
    {},  # written before fingerprints: treated as the same request
    {"sha256": "ab", "engine": "espeak"},
    {FINGERPRINT_KEY: "v2:" + "0" * 64},  # another version: nothing comparable
])
def test_an_object_without_a_comparable_fingerprint_matches(stored: dict[str, str]) -> None:
    assert fp().differs_from(stored) is None


def test_a_fingerprint_without_readable_fields_still_differs_unnamed() -> None:
    other = fp(text="Other.").metadata()
    assert fp().differs_from({FINGERPRINT_KEY: other[FINGERPRINT_KEY]}) == []
    assert fp().differs_from({**other, FIELDS_KEY: "garbage"}) == []


def test_the_message_names_fields_never_values() -> None:
    message = reuse_message("r-1", ["text", "speed"])
    assert "r-1" in message and "text, speed" in message
    assert "other fields" in reuse_message("r-1", [])
