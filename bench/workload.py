"""Synthetic request streams: voice popularity, fixed-length texts, request IDs.

ZipfSampler(n, s, seed) -> draw() gives a voice rank with P(k) proportional to 1/k**s
(rank 1 the most popular), by inverse CDF over the precomputed cumulative weights ->
requests(...) turns ranks into `SynthesisRequest`s for voice IDs `voice-0000`... with texts
of a fixed length, so the bench engine makes clips of a known duration.
"""

from __future__ import annotations

import bisect
import math
import random
import uuid
from itertools import accumulate

from topics.events import SynthesisRequest

TEXT_CHARS = 20  # every bench text has this many characters: clip length = 20 * s/char


def voice_id(rank: int) -> str:
    return f"voice-{rank:04d}"


class ZipfSampler:
    """Ranks 1..n with P(k) ~ k**-s, reproducible from `seed`."""

    def __init__(self, n: int, s: float, seed: int = 0) -> None:
        if n < 1:
            raise ValueError(f"need at least one item, got n={n}")
        if s < 0:
            raise ValueError(f"Zipf exponent must be >= 0, got {s}")
        self.n = n
        self.s = s
        self._cdf: list[float] = list(accumulate(math.pow(k, -s) for k in range(1, n + 1)))
        self._rng = random.Random(seed)  # noqa: S311 - a reproducible workload, not crypto

    def probability(self, rank: int) -> float:
        if not 1 <= rank <= self.n:
            raise ValueError(f"rank must be within 1..{self.n}, got {rank}")
        return math.pow(rank, -self.s) / self._cdf[-1]

    def draw(self) -> int:
        u = self._rng.random() * self._cdf[-1]
        # First rank whose cumulative weight exceeds u; min() guards float rounding at 1.0.
        return min(bisect.bisect_right(self._cdf, u), self.n - 1) + 1


def bench_text(i: int) -> str:
    """A text of exactly TEXT_CHARS characters, different per i, that the text front-end
    leaves as it is: i in base-26 letters (digits would be read out as words, making the
    clips about twice as long as the benchmarks say)."""
    letters = "".join(chr(ord("a") + (i // 26**k) % 26) for k in reversed(range(8)))
    text = f"Bench line {letters}."
    assert len(text) == TEXT_CHARS
    return text


def requests(count: int, voices: list[str], *, tag: str | None = None,
             prefix: str = "b") -> list[SynthesisRequest]:
    """One request per entry of `voices` (cycled to `count`), with unique request IDs."""
    tag = tag or uuid.uuid4().hex[:6]
    return [SynthesisRequest(request_id=f"{prefix}-{tag}-{i:06d}",
                             voice_id=voices[i % len(voices)], text=bench_text(i),
                             language="en") for i in range(count)]


def zipf_voices(count: int, n_voices: int, s: float, seed: int = 0) -> list[str]:
    sampler = ZipfSampler(n_voices, s, seed)
    return [voice_id(sampler.draw() - 1) for _ in range(count)]
