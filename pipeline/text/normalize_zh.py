"""Chinese normalisation (Mandarin and Cantonese share the written forms): digits to Hanzi.

text -> one pass per pattern, most specific first, each writing Hanzi so later passes never
see those digits again: dates (2024-05-01, 2024/5/1, 2024年) -> times -> money (¥, $, €, £)
-> phone-like digit strings (digit by digit, 1 read 幺) -> percentages -> ranges -> units ->
ordinals -> fractions -> plain numbers (cn2an spells them; 2 before a measure word is 两).
"""

from __future__ import annotations

import re

import cn2an

_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_DIGIT = "零一二三四五六七八九"
_PHONE_DIGIT = "零幺二三四五六七八九"
_UNITS = {
    "km/h": "公里每小时", "mph": "英里每小时", "km": "公里", "cm": "厘米", "mm": "毫米",
    "m": "米", "kg": "公斤", "mg": "毫克", "g": "克", "t": "吨", "ml": "毫升", "mL": "毫升",
    "L": "升", "kWh": "千瓦时", "kW": "千瓦", "W": "瓦", "mAh": "毫安时", "GHz": "吉赫",
    "MHz": "兆赫", "kHz": "千赫", "Hz": "赫兹", "TB": "太字节", "GB": "吉字节",
    "MB": "兆字节", "KB": "千字节", "kB": "千字节", "ms": "毫秒", "min": "分钟", "h": "小时",
    "s": "秒", "°C": "摄氏度", "℃": "摄氏度", "°F": "华氏度", "℉": "华氏度", "°": "度",
}
_UNIT_RE = "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))
_CURRENCY = {"¥": "元", "￥": "元", "$": "美元", "US$": "美元", "HK$": "港元", "€": "欧元",
             "£": "英镑"}
_CURRENCY_RE = "|".join(re.escape(c) for c in sorted(_CURRENCY, key=len, reverse=True))
# Measure words after which 2 is read 两 (两个人, 两本书), not 二.
_MEASURE = ("个", "只", "本", "位", "件", "条", "张", "次", "种", "名", "家", "台", "辆",
            "块", "杯", "瓶", "碗", "斤", "公斤", "公里", "米", "小时", "分钟", "天", "周",
            "年", "岁", "人", "份", "层", "篇", "首", "部", "场", "道", "项", "遍", "倍", "点")

_DATE = re.compile(r"(?<!\d)(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?!\d)")
_YEAR = re.compile(r"(?<!\d)(\d{2,4})(?=年)")
_TIME = re.compile(r"(?<![\d:])(\d{1,2}):(\d{2})(?::(\d{2}))?(?![\d:])")
_MONEY = re.compile(rf"(-)?({_CURRENCY_RE})\s?({_NUM})")
_PHONE = re.compile(r"(?<!\d)(?<!\d[.,])(\+\d[\d -]{6,}\d|1[3-9]\d{9}|0\d{2,3}-\d{7,8}"
                    r"|\d{3,4}-\d{3,4}-\d{4}|400-?\d{3}-?\d{4}|\d{3}-\d{4}|0\d{2,}|\d{12,})(?!\d|[.,]\d)")
_PERCENT_RANGE = re.compile(rf"({_NUM})\s?[%％]?\s?[-–~～]\s?({_NUM})\s?[%％]")
_PERCENT = re.compile(rf"(-)?({_NUM})\s?[%％]")
_RANGE = re.compile(rf"(?<![\d.,-])({_NUM})\s?[-–~～]\s?(?=-?({_NUM}))")
_UNIT = re.compile(rf"(-)?({_NUM})\s?({_UNIT_RE})(?![A-Za-z])")
_ORDINAL = re.compile(r"(?<!\d)(\d+)(?:st|nd|rd|th)(?![A-Za-z])", re.IGNORECASE)
_FRACTION = re.compile(r"(?<![\d/])(\d+)/(\d+)(?![\d/])")
# A minus sign after a letter or digit is a hyphen ("A-3"), not a negative number.
_NUMBER = re.compile(rf"(?:(?<![A-Za-z0-9])(-))?({_NUM})")


def spell(number: str, negative: bool = False) -> str:
    """Hanzi for "1,234.5"-style digits: 一千二百三十四点五; digit by digit past 16 digits."""
    plain = number.replace(",", "")
    if len(plain.split(".")[0]) > 16:  # cn2an's limit; nobody reads such a number as one
        return digits(plain)
    words = str(cn2an.an2cn(plain, "low"))
    return ("负" if negative else "") + words


def digits(text: str, table: str = _DIGIT) -> str:
    return "".join(table[int(ch)] if ch.isdigit() else "" for ch in text)


def _phone(m: re.Match[str]) -> str:
    spoken = digits(m.group(0), _PHONE_DIGIT)
    return ("加" + spoken) if m.group(0).startswith("+") else spoken


def _date(m: re.Match[str]) -> str:
    month, day = int(m.group(2)), int(m.group(3))
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return m.group(0)
    return f"{digits(m.group(1))}年{spell(str(month))}月{spell(str(day))}日"


def _time(m: re.Match[str]) -> str:
    hour, minute = int(m.group(1)), int(m.group(2))
    if hour > 24 or minute > 59:
        return m.group(0)
    spoken = f"{'两' if hour == 2 else spell(str(hour))}点"
    if minute:
        spoken += ("零" if minute < 10 else "") + f"{spell(str(minute))}分"
    if m.group(3) and int(m.group(3)):
        spoken += f"{spell(str(int(m.group(3))))}秒"
    return spoken


def _money(m: re.Match[str]) -> str:
    unit = _CURRENCY[m.group(2)]
    amount = m.group(3).replace(",", "")
    sign = "负" if m.group(1) else ""
    whole, _, cents = amount.partition(".")
    if unit == "元" and len(cents) == 2:  # ¥12.50 is read in 元角分: 十二元五角
        spoken = f"{sign}{spell(whole)}元"
        jiao, fen = int(cents[0]), int(cents[1])
        if jiao:
            spoken += f"{_DIGIT[jiao]}角"
        if fen:
            spoken += ("零" if not jiao else "") + f"{_DIGIT[fen]}分"
        return spoken
    return f"{sign}{spell(amount)}{unit}"


def _unit(m: re.Match[str]) -> str:
    return spell(m.group(2), bool(m.group(1))) + _UNITS[m.group(3)]


def _fraction(m: re.Match[str]) -> str:
    if int(m.group(2)) == 0:
        return m.group(0)
    return f"{spell(m.group(2))}分之{spell(m.group(1))}"


def _number(m: re.Match[str]) -> str:
    before = m.string[m.start() - 1] if m.start() else ""
    if (m.group(2) == "2" and not m.group(1) and before != "第"
            and m.string.startswith(_MEASURE, m.end())):
        return "两"
    return spell(m.group(2), bool(m.group(1)))


def normalize(text: str) -> str:
    text = _DATE.sub(_date, text)
    text = _YEAR.sub(lambda m: digits(m.group(1)), text)
    text = _TIME.sub(_time, text)
    text = _MONEY.sub(_money, text)
    text = _PHONE.sub(_phone, text)
    text = _PERCENT_RANGE.sub(
        lambda m: f"百分之{spell(m.group(1))}到百分之{spell(m.group(2))}", text)
    text = _PERCENT.sub(lambda m: ("负" if m.group(1) else "") + "百分之" + spell(m.group(2)),
                        text)
    text = _RANGE.sub(lambda m: f"{m.group(1)}到", text)
    text = _UNIT.sub(_unit, text)
    text = _ORDINAL.sub(lambda m: "第" + spell(m.group(1)), text)
    text = _FRACTION.sub(_fraction, text)
    return _NUMBER.sub(_number, text)
