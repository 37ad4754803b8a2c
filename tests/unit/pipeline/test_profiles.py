"""The profile RAM tier (LRU by count and bytes) and the safetensors format of the store tier."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.engines.base import Profile
from pipeline.profiles import ProfileCache, ProfileFormatError, from_safetensors, to_safetensors


def profile(voice: str, floats: int = 256, sha: str = "ab" * 32) -> Profile:
    return Profile(voice, sha, "espeak", {"median_f0_hz": 120.5},
                   {"speaker_embedding": np.arange(floats, dtype=np.float32)},
                   {"prompt_text": "你好, world"})


def test_safetensors_round_trip_keeps_every_field() -> None:
    original = Profile("v1", "cd" * 32, "cosyvoice", {"median_f0_hz": 201.25, "rate": 4.0},
                       {"emb": np.ones((1, 192), np.float32),
                        "tokens": np.arange(75, dtype=np.int32).reshape(1, 75)},
                       {"prompt_text": "希望你以后能够做的比我还好呦。"})
    back = from_safetensors(to_safetensors(original))
    assert (back.voice_id, back.sha256, back.engine) == ("v1", "cd" * 32, "cosyvoice")
    assert back.features == original.features
    assert back.text == original.text
    assert back.tensors["tokens"].dtype == np.int32
    np.testing.assert_array_equal(back.tensors["tokens"], original.tensors["tokens"])
    np.testing.assert_array_equal(back.tensors["emb"], original.tensors["emb"])


def test_foreign_or_corrupt_bytes_are_a_format_error() -> None:
    from safetensors.numpy import save

    with pytest.raises(ProfileFormatError, match="not a safetensors profile"):
        from_safetensors(b"garbage that is not safetensors")
    foreign = save({"x": np.zeros(3, np.float32)}, metadata={"format": "other"})
    with pytest.raises(ProfileFormatError, match="profile format 'other'"):
        from_safetensors(bytes(foreign))


def test_lru_evicts_the_least_recently_used_by_count() -> None:
    cache = ProfileCache(max_entries=2, max_bytes=2**30)
    for voice in ("a", "b"):
        cache.put((voice, "s", "e"), profile(voice))
    assert cache.get(("a", "s", "e")) is not None  # a is now the most recent
    cache.put(("c", "s", "e"), profile("c"))
    assert cache.get(("b", "s", "e")) is None
    assert cache.get(("a", "s", "e")) is not None
    assert cache.stats().evictions == 1


def test_lru_byte_bound_holds_whatever_the_count() -> None:
    one = profile("x", floats=10_000).nbytes
    cache = ProfileCache(max_entries=1000, max_bytes=3 * one + 10)
    for i in range(50):
        cache.put((f"v{i}", "s", "e"), profile(f"v{i}", floats=10_000))
        assert cache.stats().bytes <= cache.max_bytes
    assert len(cache) == 3
    cache.put(("huge", "s", "e"), profile("huge", floats=10_000_000))
    assert cache.get(("huge", "s", "e")) is None  # larger than the whole bound: not cached
    assert len(cache) == 3


def test_discard_voice_drops_all_its_profiles_and_their_bytes() -> None:
    cache = ProfileCache()
    cache.put(("a", "s1", "e"), profile("a"))
    cache.put(("a", "s2", "e"), profile("a"))
    cache.put(("b", "s1", "e"), profile("b"))
    assert cache.discard_voice("a") == 2
    assert len(cache) == 1
    assert cache.stats().bytes == profile("b").nbytes
