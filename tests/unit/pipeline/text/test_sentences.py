from __future__ import annotations

import pytest

from pipeline.text import annotations as markup
from pipeline.text.sentences import split


def test_chinese_sentence_ends() -> None:
    assert split("你好。今天天气很好！你去吗？我去；他不去", 80) == [
        "你好。", "今天天气很好！", "你去吗？", "我去；", "他不去"]


def test_english_sentence_ends_and_abbreviations() -> None:
    assert split("Dr. Smith arrived. Was he late? No! He paid 3.5 dollars...ok", 80) == [
        "Dr. Smith arrived.", "Was he late?", "No!", "He paid 3.5 dollars...", "ok"]


def test_closing_quotes_stay_with_their_sentence() -> None:
    assert split("他说：“走吧。”然后走了。", 80) == ["他说：“走吧。”", "然后走了。"]
    assert split('She said "go." Then left.', 80) == ['She said "go."', "Then left."]


def test_line_breaks_end_sentences() -> None:
    assert split("第一行\n第二行", 80) == ["第一行", "第二行"]


def test_a_long_sentence_falls_back_to_commas() -> None:
    text = "，".join(["这是一个比较长的分句"] * 6) + "。"
    pieces = split(text, 25)
    assert all(len(p) <= 25 for p in pieces)
    assert "".join(pieces) == text
    assert all(p.endswith(("，", "。")) for p in pieces)


def test_without_commas_english_falls_back_to_spaces() -> None:
    text = " ".join(["word"] * 30)
    pieces = split(text, 40)
    assert all(len(p) <= 40 for p in pieces)
    assert " ".join(pieces) == text


def test_without_any_break_a_hard_cut_never_separates_an_annotation() -> None:
    text = "好[h][ào]" * 30
    found = markup.find(text)
    masked = markup.mask(text, found)
    pieces = split(masked, 7)  # 7 is odd: a plain cut would land between 好 and its mark
    assert all(len(p) <= 7 for p in pieces)
    for piece in pieces:
        assert not markup.is_placeholder(piece[0])
        restored = markup.unmask(piece, text, found)
        assert restored.count("好") == restored.count("[h][ào]")


def test_punctuation_alone_joins_the_piece_before() -> None:
    assert split("真的吗？！。", 80) == ["真的吗？！。"]


def test_max_chars_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_chars must be >= 1"):
        split("x", 0)
