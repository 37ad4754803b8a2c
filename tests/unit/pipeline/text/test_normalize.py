from __future__ import annotations

import pytest

from pipeline.text.normalize import normalize


@pytest.mark.parametrize(("text", "expected"), [
    ("我有3个苹果", "我有三个苹果"),
    ("共1,234,567人", "共一百二十三万四千五百六十七人"),
    ("圆周率约3.14", "圆周率约三点一四"),
    ("气温-5度", "气温负五度"),
    ("买2个，第2名", "买两个，第二名"),
    ("增长了50%", "增长了百分之五十"),
    ("下降-3.5%", "下降负百分之三点五"),
    ("20%～30%", "百分之二十到百分之三十"),
    ("2024-05-01", "二零二四年五月一日"),
    ("2024年5月1日", "二零二四年五月一日"),
    ("2024/12/31", "二零二四年十二月三十一日"),
    ("会议14:05开始", "会议十四点零五分开始"),
    ("2:00结束", "两点结束"),
    ("7:30:15", "七点三十分十五秒"),
    ("价格¥12.50", "价格十二元五角"),
    ("￥3.05", "三元零五分"),
    ("12元", "十二元"),
    ("$3.99", "三点九九美元"),
    ("€5", "五欧元"),
    ("电话13812345678", "电话幺三八幺二三四五六七八"),
    ("座机010-12345678。", "座机零幺零幺二三四五六七八。"),
    ("拨555-0100", "拨五五五零幺零零"),
    ("3-5公里", "三到五公里"),
    ("时速120km/h", "时速一百二十公里每小时"),
    ("重5kg，长3 m", "重五公斤，长三米"),
    ("25℃和25°C", "二十五摄氏度和二十五摄氏度"),
    ("16GB内存", "十六吉字节内存"),
    ("四分之三是3/4", "四分之三是四分之三"),
    ("１２３个", "一百二十三个"),
])
def test_chinese(text: str, expected: str) -> None:
    assert normalize(text, "zh") == expected


def test_cantonese_shares_the_written_chinese_rules() -> None:
    assert normalize("我有3個蘋果", "yue") == "我有三個蘋果"


@pytest.mark.parametrize(("text", "expected"), [
    ("I have 3 apples", "I have three apples"),
    ("1,234,567 people", "one million two hundred and thirty-four thousand five hundred and "
                         "sixty-seven people"),
    ("pi is 3.14", "pi is three point one four"),
    ("it is -5 outside", "it is minus five outside"),
    ("50% off", "fifty percent off"),
    ("-3.5% growth", "minus three point five percent growth"),
    ("the 1st, 2nd, 3rd and 21st", "the first, second, third and twenty-first"),
    ("on 2024-05-01", "on May first, twenty twenty-four"),
    ("May 1, 2024", "May first, twenty twenty-four"),
    ("1 May 2024", "the first of May, twenty twenty-four"),
    ("at 10:30 am", "at ten thirty a m"),
    ("at 7:00", "at seven o'clock"),
    ("at 7:05", "at seven oh five"),
    ("$3.99", "three dollars and ninety-nine cents"),
    ("$1", "one dollar"),
    ("$5 million", "five million dollars"),
    ("¥12.50", "twelve yuan and fifty fen"),
    ("£2.01", "two pounds and one penny"),
    ("€20", "twenty euros"),
    ("call 555-0100.", "call five five five, zero one zero zero."),
    ("+1 415 555 0100", "plus one, four one five, five five five, zero one zero zero"),
    ("agent 007", "agent zero zero seven"),
    ("dial 4155550100", "dial four one five five five five zero one zero zero"),
    ("3-5 km", "three to five kilometers"),
    ("1 km", "one kilometer"),
    ("120 km/h", "one hundred and twenty kilometers per hour"),
    ("5 kg and 16 GB", "five kilograms and sixteen gigabytes"),
    ("25°C", "twenty-five degrees Celsius"),
    ("3/4 of 1/2", "three quarters of one half"),
    ("in 1990", "in nineteen ninety"),
    ("the 1990s", "the nineteen nineties"),
    ("a 4K screen", "a four K screen"),
    ("salt & pepper", "salt and pepper"),
])
def test_english(text: str, expected: str) -> None:
    assert normalize(text, "en") == expected


def test_regional_english_uses_the_english_rules() -> None:
    assert normalize("3 km", "en-gb") == "three kilometers"


def test_other_languages_only_tidy_whitespace() -> None:
    assert normalize("  Il y a   3 chats. ", "fr") == "Il y a 3 chats."


def test_masked_annotations_are_not_rewritten() -> None:
    placeholder = "\ue000"
    assert normalize(f"read{placeholder} 2 books", "en") == f"read{placeholder} two books"
