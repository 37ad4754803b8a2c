"""One track for a whole job: its clips placed on the timeline, at one sample rate.

Flow: (span, decoded clip) pairs in index order -> `track_rate` picks the rate (the one most
clips already have, so most are copied, not resampled) -> each clip is resampled (soxr) and
written at `round(start_s * rate)` into a silent buffer that is as long as the timeline ->
`Audio`, which `pipeline.encode` turns into the requested container.

Each clip is cut or padded to its span's length, so the track lines up with the timeline
and the subtitles sample for sample even where a decoder reports a few samples more or less
than the worker's `duration_s`; the gaps are the silence between spans.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from pipeline.audio import Audio
from pipeline.encode import resample
from topics.events import ClipSpan


def track_rate(rates: Sequence[int]) -> int:
    """The most common rate; on a tie the highest, so no clip loses bandwidth needlessly."""
    if not rates:
        raise ValueError("no clips to assemble")
    counts = Counter(rates)
    return max(counts, key=lambda rate: (counts[rate], rate))


def assemble(clips: Sequence[tuple[ClipSpan, Audio]], sample_rate: int | None = None) -> Audio:
    """The clips at their spans' positions in one mono track; silence everywhere else."""
    if not clips:
        raise ValueError("no clips to assemble")
    rate = sample_rate or track_rate([audio.sample_rate for _, audio in clips])
    end = max(span.end_s for span, _ in clips)
    track = np.zeros(round(end * rate), dtype=np.float32)
    for span, audio in clips:
        if span.end_s < span.start_s:
            raise ValueError(f"clip {span.index} ends before it starts")
        start = round(span.start_s * rate)
        length = round(span.end_s * rate) - start
        samples = resample(audio, rate).samples[:length]
        track[start:start + len(samples)] = samples
    return Audio(samples=track, sample_rate=rate)
