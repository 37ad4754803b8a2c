"""Timeline and SubRip: clips laid end to end, cue times exact to the millisecond."""

from __future__ import annotations

import math

import pytest

from pipeline.subtitles import Cue, cues, lay_out, parse_srt, render_srt, render_vtt, timestamp
from topics.events import ClipSpan


def test_clips_are_laid_end_to_end_with_the_gap_between_neighbours() -> None:
    spans = lay_out([(0, 1.25), (1, 0.5), (3, 2.0)], gap_s=0.3)
    assert spans == [ClipSpan(index=0, start_s=0.0, end_s=1.25),
                     ClipSpan(index=1, start_s=1.55, end_s=2.05),
                     ClipSpan(index=3, start_s=2.35, end_s=4.35)]


def test_no_gap_means_each_clip_starts_where_the_last_ended() -> None:
    spans = lay_out([(0, 0.4), (1, 0.6)], gap_s=0.0)
    assert spans[1].start_s == spans[0].end_s == 0.4


def test_rounding_does_not_accumulate_over_a_long_job() -> None:
    durations = [(i, 1 / 3) for i in range(3000)]
    last = lay_out(durations, gap_s=0.1117)[-1]
    exact_start = 2999 * (1 / 3) + 2999 * 0.1117
    assert abs(last.start_s - exact_start) <= 0.0005
    assert abs(last.end_s - last.start_s - 1 / 3) <= 0.001


@pytest.mark.parametrize(("durations", "gap", "message"), [
    ([(0, 1.0)], -0.1, "gap must be >= 0"),
    ([(0, 1.0), (1, -0.5)], 0.2, "clip 1 has a negative duration"),
])
def test_impossible_layouts_are_refused(durations: list[tuple[int, float]], gap: float,
                                        message: str) -> None:
    with pytest.raises(ValueError, match=message):
        lay_out(durations, gap)


@pytest.mark.parametrize(("seconds", "text"), [
    (0.0, "00:00:00,000"), (1.25, "00:00:01,250"), (3723.4567, "01:02:03,457"),
    (59.9996, "00:01:00,000"), (36000.0, "10:00:00,000"),
])
def test_timestamps_are_subrip_hh_mm_ss_comma_ms(seconds: float, text: str) -> None:
    assert timestamp(seconds) == text


def test_negative_times_are_a_bug_not_a_subtitle() -> None:
    with pytest.raises(ValueError, match="negative"):
        timestamp(-0.001)


def test_render_then_parse_gives_the_cues_back() -> None:
    spans = lay_out([(0, 1.5), (1, 2.25), (2, 0.75)], gap_s=0.25)
    made = cues(spans, {0: "欢迎回来。", 1: "Hello\n\nthere,   friend.", 2: "再见"})
    srt = render_srt(made)
    assert srt.startswith("1\n00:00:00,000 --> 00:00:01,500\n欢迎回来。\n\n2\n")
    back = parse_srt(srt)
    assert [c.text for c in back] == ["欢迎回来。", "Hello there, friend.", "再见"]
    for got, span in zip(back, spans, strict=True):
        assert math.isclose(got.start_s, span.start_s, abs_tol=1e-9)
        assert math.isclose(got.end_s, span.end_s, abs_tol=1e-9)


def test_a_clip_without_text_gets_no_cue_and_numbering_stays_dense() -> None:
    spans = lay_out([(0, 1.0), (1, 1.0), (2, 1.0)], gap_s=0.0)
    made = cues(spans, {0: "one", 2: "three", 1: "   "})
    assert [(c.number, c.text, c.start_s) for c in made] == [(1, "one", 0.0), (2, "three", 2.0)]


def test_parse_tolerates_a_bom_crlf_and_multi_line_cues() -> None:
    text = "\ufeff1\r\n00:00:01,000 --> 00:00:02,500\r\nfirst\r\nsecond\r\n\r\n" \
           "2\r\n00:00:03.000 --> 00:00:04,000 X1:0\r\nthird\r\n"
    assert parse_srt(text) == [Cue(1, 1.0, 2.5, "first\nsecond"), Cue(2, 3.0, 4.0, "third")]


def test_webvtt_has_the_srt_cues_with_a_header_a_dot_and_markup_escaped() -> None:
    spans = lay_out([(0, 1.5), (1, 2.25)], gap_s=0.25)
    made = cues(spans, {0: "欢迎回来。", 1: "a <b> & c --> d"})
    vtt = render_vtt(made)
    assert vtt.startswith("WEBVTT\n\n1\n00:00:00.000 --> 00:00:01.500\n欢迎回来。\n\n2\n")
    assert "a &lt;b&gt; &amp; c --&gt; d" in vtt
    back = parse_srt(vtt)  # the same cue times as the .srt's
    assert [(c.start_s, c.end_s) for c in back] == \
        [(c.start_s, c.end_s) for c in parse_srt(render_srt(made))]
