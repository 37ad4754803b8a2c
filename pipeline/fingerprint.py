"""What made a stored clip: a request's fingerprint, kept as object metadata beside the audio.

request -> `Fingerprint.of(request)`: the request fields that decide the audio
(AUDIO_FIELDS), those left at their default dropped, as sorted compact JSON -> sha256 ->
`fingerprint` (`v1:<hex>`), plus `fingerprint-fields` (a short hash per field, only to name
what differs) -> `metadata()` -> the object's user metadata (pipeline.processing).
A later record with the same request_id (so the same object key) -> `Fingerprint.of` again
-> `differs_from(stored metadata)`: None (the same request: answered from the object), or
the fields that differ (answered `rejected`, `request_id_reused`).

Not in it: `deadline`, `job`, `metadata`, `stream` and `schema` (when and how the audio is
delivered, and what is echoed back, not what is said), nor the voice's reference sha256 (the
voice's state, not the request's: a re-send after the voice was updated is the same request,
answered from the clip made before; the object records that sha256 as `voice-sha256`).
`text` is compared exactly as sent. Defaults are dropped so that `"format": "wav"` and no
`format` are one request, and a field added to the request later, left at its default, does
not change the fingerprints of objects already stored.

An object stored before fingerprints existed, or by another fingerprint version, has nothing
comparable and counts as the same request (the behaviour before this check).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from topics.events import SynthesisRequest

VERSION = "v1"
# The request fields that decide the audio, in the contract's order (docs/contract.md).
AUDIO_FIELDS = ("voice_id", "reference", "text", "mode", "instruct", "language", "format",
                "sample_rate", "speed")
FINGERPRINT_KEY = "fingerprint"  # object user metadata: `v1:<sha256 hex>`
FIELDS_KEY = "fingerprint-fields"  # `name=<12 hex>,...`: what differs, named in a rejection
_FIELD_HEX = 12
# Each field's default; a required field has none and is always in the fingerprint.
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in msgspec.structs.fields(SynthesisRequest)
                             if f.default is not msgspec.NODEFAULT}


def _digest(value: bytes) -> str:
    return hashlib.sha256(value).hexdigest()


@dataclass(frozen=True)
class Fingerprint:
    value: str  # `v1:<sha256 hex>` of the canonical JSON
    fields: dict[str, str]  # field name -> short hash of its value (set fields only)

    @classmethod
    def of(cls, request: SynthesisRequest) -> Fingerprint:
        chosen = {name: getattr(request, name) for name in AUDIO_FIELDS
                  if name not in _DEFAULTS or getattr(request, name) != _DEFAULTS[name]}
        canonical = orjson.dumps(chosen, option=orjson.OPT_SORT_KEYS)
        fields = {name: _digest(orjson.dumps(value))[:_FIELD_HEX]
                  for name, value in sorted(chosen.items())}
        return cls(f"{VERSION}:{_digest(canonical)}", fields)

    def metadata(self) -> dict[str, str]:
        """The object's user metadata entries (US-ASCII, under 1 KB together)."""
        return {FINGERPRINT_KEY: self.value,
                FIELDS_KEY: ",".join(f"{k}={v}" for k, v in self.fields.items())}

    def differs_from(self, stored: dict[str, str]) -> list[str] | None:
        """None when `stored` (an object's metadata) is from this same request, or has no
        fingerprint of this version; else the names of the fields that differ (empty when
        the stored object does not say which)."""
        theirs = stored.get(FINGERPRINT_KEY, "")
        if not theirs.startswith(f"{VERSION}:") or theirs == self.value:
            return None
        fields = _parse_fields(stored.get(FIELDS_KEY, ""))
        return [] if fields is None else self.changed(Fingerprint(theirs, fields))

    def changed(self, other: Fingerprint) -> list[str]:
        """The fields whose values differ between the two requests, in AUDIO_FIELDS order."""
        return [name for name in AUDIO_FIELDS if self.fields.get(name) != other.fields.get(name)]


def _parse_fields(text: str) -> dict[str, str] | None:
    pairs = [item.partition("=") for item in text.split(",") if item]
    if not pairs or any(not sep for _, sep, _ in pairs):
        return None
    return {name: value for name, _, value in pairs}


def reuse_message(request_id: str, differing: list[str]) -> str:
    """The rejection's message: names the fields, never their values (a text may be 2,000
    characters; the first request's values are not in the object at all)."""
    what = ", ".join(differing) if differing else "other fields"
    return (f"request_id {request_id!r} was already used for another request (it differs in "
            f"{what}); the first request's audio stands: send this one under a new "
            "request_id")
