from __future__ import annotations

import pytest

from pipeline.engines.base import StyleHints
from pipeline.text.instructions import parse


@pytest.mark.parametrize(("instruct", "dialect", "language"), [
    ("用四川话说这句话", "sichuan", None), ("用粤语说", "cantonese", "yue"),
    ("请用广东话表达", "cantonese", "yue"), ("上海话", "shanghai", None),
    ("用东北话讲", "dongbei", None), ("say it in Cantonese", "cantonese", "yue"),
    ("客家话", "hakka", "hak"), ("Sichuanese accent please", "sichuan", None),
])
def test_dialects_and_the_language_they_imply(instruct: str, dialect: str,
                                              language: str | None) -> None:
    parsed = parse(instruct)
    assert parsed.style.dialect == dialect
    assert parsed.language == language


@pytest.mark.parametrize(("instruct", "emotion"), [
    ("用悲伤的语气说", "sad"), ("开心地说", "happy"), ("生气地说", "angry"),
    ("say it angrily", "angry"), ("whisper this", "whisper"), ("悄悄地说", "whisper"),
    ("calm and gentle", "calm"), ("很激动", "excited"), ("the ambassador arrived", None),
])
def test_emotions(instruct: str, emotion: str | None) -> None:
    assert parse(instruct).style.emotion == emotion


@pytest.mark.parametrize(("instruct", "speed"), [
    ("说快一点", 1.25), ("慢一点", 0.8), ("read it slowly", 0.8), ("faster please", 1.25),
    ("请用尽可能快地语速说一句话", 1.5), ("very slowly", 0.65), ("had breakfast", None),
])
def test_speed_cues(instruct: str, speed: float | None) -> None:
    assert parse(instruct).style.speed == speed


@pytest.mark.parametrize(("instruct", "persona"), [
    ("像新闻主播一样", "news_anchor"), ("像讲故事一样", "storyteller"),
    ("like a news anchor", "news_anchor"), ("tell it like a bedtime story", "storyteller"),
    ("像小孩子一样", "child"),
])
def test_personas(instruct: str, persona: str) -> None:
    assert parse(instruct).style.persona == persona


def test_everything_at_once_and_free_text_kept_verbatim() -> None:
    parsed = parse("  用粤语，像新闻主播一样，开心地说，慢一点  ")
    assert parsed.style == StyleHints(dialect="cantonese", emotion="happy",
                                      persona="news_anchor", speed=0.8,
                                      free_text="用粤语，像新闻主播一样，开心地说，慢一点")


def test_unknown_cues_still_reach_free_text_engines() -> None:
    parsed = parse("带一点神秘感")
    assert parsed.style == StyleHints(free_text="带一点神秘感")


@pytest.mark.parametrize("instruct", [None, "", "   "])
def test_no_instruction_gives_empty_hints(instruct: str | None) -> None:
    assert parse(instruct).style == StyleHints()
    assert parse(instruct).language is None
