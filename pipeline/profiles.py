"""Voice profiles in three tiers: process RAM -> object store -> computed from the reference.

ProfileCache is the RAM tier: an LRU bounded both by entry count and by bytes (a CosyVoice
profile holds prompt mel features, so a count alone does not bound memory). The store tier
is one safetensors file per (voice, reference sha256, engine) at
`voices/{voice_id}/profile-{sha[:16]}-{engine}.safetensors`: arrays as tensors, scalars and
strings as JSON in the header metadata, so a new owner after a rebalance or a restarted
worker loads instead of recomputing.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from pipeline.engines.base import Profile
from topics.errors import ErrorCode, LocalError

FORMAT = "voicefactory.profile.v1"
ProfileKey = tuple[str, str, str]  # (voice_id, sha256, engine)


class ProfileFormatError(LocalError, ValueError):
    """A stored profile that is not ours or not this version: recompute it."""

    default_code = ErrorCode.ENGINE_ERROR


def to_safetensors(profile: Profile) -> bytes:
    from safetensors.numpy import save

    tensors = {name: np.ascontiguousarray(array) for name, array in profile.tensors.items()}
    metadata = {"format": FORMAT, "voice_id": profile.voice_id, "sha256": profile.sha256,
                "engine": profile.engine, "features": json.dumps(profile.features),
                "text": json.dumps(profile.text, ensure_ascii=False)}
    return bytes(save(tensors, metadata=metadata))


def from_safetensors(data: bytes) -> Profile:
    from safetensors import SafetensorError
    from safetensors.numpy import load

    try:
        tensors = load(data)
        meta = _header_metadata(data)
    except (SafetensorError, ValueError) as exc:
        raise ProfileFormatError(f"not a safetensors profile: {exc}") from None
    if meta.get("format") != FORMAT:
        raise ProfileFormatError(f"profile format {meta.get('format')!r}, expected {FORMAT!r}")
    try:
        features = {k: float(v) for k, v in json.loads(meta["features"]).items()}
        text = {k: str(v) for k, v in json.loads(meta["text"]).items()}
        return Profile(voice_id=meta["voice_id"], sha256=meta["sha256"], engine=meta["engine"],
                       features=features, tensors=dict(tensors), text=text)
    except (KeyError, TypeError, ValueError) as exc:
        raise ProfileFormatError(f"profile metadata incomplete: {exc}") from None


def _header_metadata(data: bytes) -> dict[str, str]:
    # safetensors.numpy.load drops the header's __metadata__; it is 8 bytes of length + JSON.
    if len(data) < 8:
        raise ValueError("shorter than a safetensors header")
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    meta = header.get("__metadata__", {})
    return {str(k): str(v) for k, v in meta.items()}


@dataclass(frozen=True)
class CacheStats:
    entries: int
    bytes: int
    evictions: int


class ProfileCache:
    """Thread-safe LRU of profiles bounded by `max_entries` and `max_bytes`.

    A single profile larger than `max_bytes` is not cached at all (it would evict everything
    and still not fit); callers then recompute or reload it per use, which the metrics show.
    """

    def __init__(self, *, max_entries: int = 256, max_bytes: int = 512 * 2**20) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError("profile cache bounds must be positive")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._items: OrderedDict[ProfileKey, Profile] = OrderedDict()
        self._bytes = 0
        self._evictions = 0
        self._lock = threading.Lock()

    def get(self, key: ProfileKey) -> Profile | None:
        with self._lock:
            profile = self._items.get(key)
            if profile is not None:
                self._items.move_to_end(key)
            return profile

    def put(self, key: ProfileKey, profile: Profile) -> None:
        size = profile.nbytes
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            if size > self.max_bytes:
                return
            self._items[key] = profile
            self._bytes += size
            while len(self._items) > self.max_entries or self._bytes > self.max_bytes:
                _, evicted = self._items.popitem(last=False)
                self._bytes -= evicted.nbytes
                self._evictions += 1

    def discard_voice(self, voice_id: str) -> int:
        """Drop every profile of a voice (deleted, or its partition revoked)."""
        with self._lock:
            doomed = [k for k in self._items if k[0] == voice_id]
            for key in doomed:
                self._bytes -= self._items.pop(key).nbytes
            return len(doomed)

    def voices(self) -> list[str]:
        """The voices with a profile held, most recently used first (the fleet view's
        `hot` list)."""
        with self._lock:
            return list(dict.fromkeys(key[0] for key in reversed(self._items)))

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(len(self._items), self._bytes, self._evictions)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
