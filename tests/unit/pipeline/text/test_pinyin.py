from __future__ import annotations

from pipeline.text.pinyin import hanzi_to_pinyin, syllables


def test_hanzi_become_numbered_pinyin_with_neutral_tone_five() -> None:
    assert hanzi_to_pinyin("你好，世界。") == "ni3 hao3, shi4 jie4."
    assert hanzi_to_pinyin("我的") == "wo3 de5"


def test_latin_runs_pass_through_between_syllables() -> None:
    assert hanzi_to_pinyin("我用AI配音") == "wo3 yong4 AI pei4 yin1"


def test_u_umlaut_is_written_v_for_espeak() -> None:
    assert hanzi_to_pinyin("绿女") == "lv4 nv3"


def test_an_annotation_changes_the_reading_of_the_character_it_follows() -> None:
    plain = dict(enumerate(syllables("你好，我很好。")))
    marked = dict(enumerate(syllables("你好[h][ào]，我很好。")))
    assert plain[1] == ("好", "hao3")
    assert marked[1] == ("好", "hao4")  # the annotated 好
    assert marked[4] == plain[4] == ("好", "hao3")  # the other 好 keeps pypinyin's reading
    assert hanzi_to_pinyin("你好[h][ào]，我很好。") == "ni3 hao4, wo3 hen3 hao3."
    assert hanzi_to_pinyin("你好，我很好。") == "ni3 hao3, wo3 hen3 hao3."


def test_tone_digit_zero_initial_and_umlaut_annotations() -> None:
    assert hanzi_to_pinyin("重[ch][ong2]新") == "chong2 xin1"
    assert hanzi_to_pinyin("爱[][ài]") == "ai4"
    assert hanzi_to_pinyin("率[l][ǜ]") == "lv4"
    assert hanzi_to_pinyin("去[q][ù]") == "qu4"


def test_phrase_context_still_applies_around_an_annotation() -> None:
    # 银行 is a phrase pypinyin reads hang2; annotating 银 must not break that.
    assert hanzi_to_pinyin("银[y][ín]行") == "yin2 hang2"


def test_control_tags_and_phoneme_markup_are_not_read() -> None:
    assert hanzi_to_pinyin("你好[breath]世界") == "ni3 hao3 shi4 jie4"
