"""A job's timeline and its subtitles (SubRip .srt, WebVTT .vtt), from clip durations. Pure.

Flow: (index, duration) of every clip that has audio, in index order -> `lay_out` places
them end to end with a fixed gap -> `ClipSpan`s (the job event's timeline) -> `cues` pairs
each span with its line's text -> `render_srt` writes the .srt, `render_vtt` the same cues
as WebVTT (what HTML <track> and most web players read). `parse_srt` reads either back
(tests and downstream tools use it to check cue times against the timeline).

Positions are summed in float seconds and rounded to the millisecond only on output, so
rounding never accumulates along a long job: cue i starts within 0.5 ms of the sum of the
durations and gaps before it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from topics.events import ClipSpan


@dataclass(frozen=True)
class Cue:
    number: int  # 1-based SubRip sequence number
    start_s: float
    end_s: float
    text: str


def lay_out(durations: Iterable[tuple[int, float]], gap_s: float) -> list[ClipSpan]:
    """Clips laid end to end, `gap_s` of silence between neighbours (none before the first)."""
    if gap_s < 0:
        raise ValueError(f"gap must be >= 0 s, got {gap_s}")
    spans: list[ClipSpan] = []
    cursor = 0.0
    for index, duration in durations:
        if duration < 0:
            raise ValueError(f"clip {index} has a negative duration {duration}")
        if spans:
            cursor += gap_s
        spans.append(ClipSpan(index=index, start_s=round(cursor, 3),
                              end_s=round(cursor + duration, 3)))
        cursor += duration
    return spans


def cues(spans: Sequence[ClipSpan], texts: dict[int, str]) -> list[Cue]:
    """One cue per span whose line has text; a clip without text gets no cue (a subtitle
    with nothing in it would only flash an empty box)."""
    out: list[Cue] = []
    for span in spans:
        text = _one_line(texts.get(span.index, ""))
        if text:
            out.append(Cue(number=len(out) + 1, start_s=span.start_s, end_s=span.end_s,
                           text=text))
    return out


def timestamp(seconds: float, separator: str = ",") -> str:
    """SubRip time, `HH:MM:SS,mmm` (WebVTT's is the same with a `.`)."""
    if seconds < 0:
        raise ValueError(f"negative subtitle time {seconds}")
    total_ms = round(seconds * 1000)
    hours, rest = divmod(total_ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, ms = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{ms:03d}"


def render_srt(items: Iterable[Cue]) -> str:
    blocks = [f"{c.number}\n{timestamp(c.start_s)} --> {timestamp(c.end_s)}\n{c.text}\n"
              for c in items]
    return "\n".join(blocks)


def render_vtt(items: Iterable[Cue]) -> str:
    """The cues as WebVTT: numbered like the .srt, `.` before the milliseconds, and the
    three characters WebVTT cue text reads as markup escaped (a line with `<` or `-->`
    would otherwise lose text or end the cue)."""
    blocks = [f"{c.number}\n{timestamp(c.start_s, '.')} --> {timestamp(c.end_s, '.')}\n"
              f"{_vtt_text(c.text)}\n" for c in items]
    return "\n".join(["WEBVTT\n", *blocks])


def _vtt_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_TIME = r"(\d+):(\d{2}):(\d{2})[,.](\d{3})"
_CUE_RE = re.compile(rf"(\d+)\s*\n{_TIME}\s*-->\s*{_TIME}[^\n]*\n(.*?)(?:\n\s*\n|\s*\Z)", re.S)


def parse_srt(text: str) -> list[Cue]:
    """The cues of an .srt document (BOM and CRLF tolerated)."""
    body = text.lstrip("\ufeff").replace("\r\n", "\n")
    out = []
    for m in _CUE_RE.finditer(body):
        g = m.groups()
        start = int(g[1]) * 3600 + int(g[2]) * 60 + int(g[3]) + int(g[4]) / 1000
        end = int(g[5]) * 3600 + int(g[6]) * 60 + int(g[7]) + int(g[8]) / 1000
        out.append(Cue(number=int(g[0]), start_s=start, end_s=end, text=g[9].strip()))
    return out


def _one_line(text: str) -> str:
    # A blank line ends a cue in SubRip, so a line's own line breaks must not survive.
    return " ".join(text.split())
