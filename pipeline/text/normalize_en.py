"""English normalisation: digits and symbols to the words a reader would say.

text -> one pass per pattern, most specific first, each replacing what it recognises with
words so later passes never see those digits again: dates -> times -> money -> phone-like
digit strings (read digit by digit) -> percentages -> ranges -> units -> ordinals ->
fractions -> years after "in/since/..." and decades -> plain numbers (integers with or
without thousands separators, decimals, negatives). num2words spells the numbers.
"""

from __future__ import annotations

import re
from decimal import Decimal

from num2words import num2words

_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")
_MONTH_INDEX = {m.lower(): i for i, m in enumerate(_MONTHS, 1)}
_MONTH_INDEX.update({m[:3].lower(): i for i, m in enumerate(_MONTHS, 1)})
_MONTH_INDEX["sept"] = 9
_MONTH_NAME = "(?:" + "|".join([*_MONTHS, "Jan", "Feb", "Mar", "Apr", "Jun", "Jul", "Aug",
                                  "Sept", "Sep", "Oct", "Nov", "Dec"]) + r")\.?"
_DIGITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
# (singular, plural) spoken forms; matched case-sensitively, longest first.
_UNITS = {
    "km/h": ("kilometer per hour", "kilometers per hour"), "mph": ("mile per hour",
                                                                  "miles per hour"),
    "km": ("kilometer", "kilometers"), "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"), "m": ("meter", "meters"),
    "kg": ("kilogram", "kilograms"), "mg": ("milligram", "milligrams"), "g": ("gram", "grams"),
    "ml": ("milliliter", "milliliters"), "mL": ("milliliter", "milliliters"),
    "L": ("liter", "liters"), "kWh": ("kilowatt hour", "kilowatt hours"),
    "kW": ("kilowatt", "kilowatts"), "W": ("watt", "watts"), "mAh": ("milliamp hour",
                                                                    "milliamp hours"),
    "GHz": ("gigahertz", "gigahertz"), "MHz": ("megahertz", "megahertz"),
    "kHz": ("kilohertz", "kilohertz"), "Hz": ("hertz", "hertz"),
    "TB": ("terabyte", "terabytes"), "GB": ("gigabyte", "gigabytes"),
    "MB": ("megabyte", "megabytes"), "KB": ("kilobyte", "kilobytes"),
    "kB": ("kilobyte", "kilobytes"), "ms": ("millisecond", "milliseconds"),
    "min": ("minute", "minutes"), "h": ("hour", "hours"),
    "°C": ("degree Celsius", "degrees Celsius"), "℃": ("degree Celsius", "degrees Celsius"),
    "°F": ("degree Fahrenheit", "degrees Fahrenheit"),
    "℉": ("degree Fahrenheit", "degrees Fahrenheit"), "°": ("degree", "degrees"),
}
_UNIT_RE = "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))
_CURRENCY = {"$": ("dollar", "dollars", "cent", "cents"),
             "€": ("euro", "euros", "cent", "cents"),
             "£": ("pound", "pounds", "penny", "pence"),
             "¥": ("yuan", "yuan", "fen", "fen"), "￥": ("yuan", "yuan", "fen", "fen")}
_SCALE = {"k": "thousand", "thousand": "thousand", "m": "million", "mn": "million",
          "million": "million", "b": "billion", "bn": "billion", "billion": "billion"}

_ISO_DATE = re.compile(r"(?<![\d-])(\d{4})-(\d{1,2})-(\d{1,2})(?![\d-])")
_US_DATE = re.compile(r"(?<![\d/])(\d{1,2})/(\d{1,2})/(\d{4})(?![\d/])")
_MDY = re.compile(rf"\b({_MONTH_NAME})\s+(\d{{1,2}})(?:st|nd|rd|th)?(?:,?\s+(\d{{4}}))?\b")
_DMY = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({_MONTH_NAME})(?:,?\s+(\d{{4}}))?\b")
_TIME = re.compile(r"(?<![\d:])(\d{1,2}):(\d{2})(?::(\d{2}))?(?![\d:])"
                   r"(?:\s*([AaPp])\.?\s?[Mm]\.?(?![A-Za-z]))?")
_MONEY = re.compile(rf"(-)?([$€£¥￥])\s?({_NUM})(?:\s?(k|m|mn|b|bn|thousand|million|billion)\b)?",
                    re.IGNORECASE)
_YUAN = re.compile(rf"({_NUM})\s?(?:元|块|RMB\b|CNY\b)")
# A trailing "," or "." is punctuation, not part of the number, unless a digit follows it.
_PHONE = re.compile(r"(?<!\w)(?<!\d[.,])(\+\d[\d ()-]{6,}\d|\(\d{2,4}\)\s?\d{3,4}[- ]\d{3,4}"
                    r"|\d{2,4}(?:-\d{2,5}){2,}|\d{3}-\d{4}|0\d{2,}|\d{10,})(?!\w|[.,]\d)")
_PERCENT_RANGE = re.compile(rf"({_NUM})\s?%?\s?[-–~]\s?({_NUM})\s?%")
_PERCENT = re.compile(rf"(-)?({_NUM})\s?[%％]")
_RANGE = re.compile(rf"(?<![\w.,-])({_NUM})\s?[-–~]\s?(?=({_NUM}))")
_UNIT = re.compile(rf"(-)?({_NUM})\s?({_UNIT_RE})(?![A-Za-z])")
_ORDINAL = re.compile(r"\b(\d+)(st|nd|rd|th)\b", re.IGNORECASE)
_FRACTION = re.compile(r"(?<![\w/])(\d+)/(\d+)(?![\w/])")
_YEAR = re.compile(r"\b(in|since|from|by|until|till|of|year|before|after|during|circa)"
                   r"\s+(1[1-9]\d\d|20\d\d)\b", re.IGNORECASE)
_DECADE = re.compile(r"\b(1[1-9]|20)(\d)0'?s\b")
_NUMBER = re.compile(rf"(?<![\w.])(-)?({_NUM})(?=([A-Za-z])?)")


def spell(number: str, negative: bool = False) -> str:
    """Cardinal words for "1,234.5"-style digits: "one thousand two hundred ..."."""
    value = Decimal(number.replace(",", ""))
    return str(num2words(-value if negative else value)).replace(",", "")


def digits(text: str) -> str:
    """Digit by digit, groups kept as pauses: "555-0100" -> "five five five, zero one ..."."""
    groups = re.findall(r"\d+", text)
    spoken = ", ".join(" ".join(_DIGITS[int(d)] for d in g) for g in groups)
    return ("plus " if text.lstrip().startswith("+") else "") + spoken


def ordinal(n: int) -> str:
    return str(num2words(n, to="ordinal"))


def year(n: int) -> str:
    return str(num2words(n, to="year")).replace(",", "")


def _date(month: int, day: int, yyyy: str | None) -> str | None:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    spoken = f"{_MONTHS[month - 1]} {ordinal(day)}"
    return f"{spoken}, {year(int(yyyy))}" if yyyy else spoken


def _iso(m: re.Match[str]) -> str:
    return _date(int(m.group(2)), int(m.group(3)), m.group(1)) or m.group(0)


def _us(m: re.Match[str]) -> str:
    return _date(int(m.group(1)), int(m.group(2)), m.group(3)) or m.group(0)


def _mdy(m: re.Match[str]) -> str:
    month = _MONTH_INDEX[m.group(1).rstrip(".").lower()]
    return _date(month, int(m.group(2)), m.group(3)) or m.group(0)


def _dmy(m: re.Match[str]) -> str:
    month = _MONTH_INDEX[m.group(2).rstrip(".").lower()]
    day = int(m.group(1))
    if not 1 <= day <= 31:
        return m.group(0)
    spoken = f"the {ordinal(day)} of {_MONTHS[month - 1]}"
    return f"{spoken}, {year(int(m.group(3)))}" if m.group(3) else spoken


def _time(m: re.Match[str]) -> str:
    hour, minute = int(m.group(1)), int(m.group(2))
    if hour > 24 or minute > 59:
        return m.group(0)
    words = str(num2words(hour))
    if minute == 0:
        words += "" if m.group(4) else " o'clock"
    elif minute < 10:
        words += f" oh {num2words(minute)}"
    else:
        words += f" {num2words(minute)}"
    if m.group(3) and int(m.group(3)):
        words += f" and {num2words(int(m.group(3)))} seconds"
    if m.group(4):
        words += f" {m.group(4).lower()} m"
    return words


def _money(m: re.Match[str]) -> str:
    one, many, sub_one, sub_many = _CURRENCY[m.group(2)]
    amount = m.group(3).replace(",", "")
    sign = "minus " if m.group(1) else ""
    if m.group(4):
        return f"{sign}{spell(amount)} {_SCALE[m.group(4).lower()]} {many}"
    whole, _, cents = amount.partition(".")
    spoken = f"{sign}{spell(whole)} {one if whole == '1' else many}"
    if len(cents) == 2 and int(cents):
        spoken += f" and {spell(cents.lstrip('0'))} {sub_one if cents == '01' else sub_many}"
    elif cents and int(cents):
        spoken = f"{sign}{spell(amount)} {many}"
    return spoken


def _unit(m: re.Match[str]) -> str:
    one, many = _UNITS[m.group(3)]
    number = m.group(2)
    spoken = spell(number, negative=bool(m.group(1)))
    return f"{spoken} {one if number == '1' and not m.group(1) else many}"


def _fraction(m: re.Match[str]) -> str:
    num, den = int(m.group(1)), int(m.group(2))
    if den == 0:
        return m.group(0)
    if den == 2:
        name = "half" if num == 1 else "halves"
    elif den == 4:
        name = "quarter" if num == 1 else "quarters"
    else:
        name = ordinal(den) + ("" if num == 1 else "s")
    return f"{num2words(num)} {name}"


def _decade(m: re.Match[str]) -> str:
    words = year(int(m.group(1) + m.group(2) + "0"))
    return words[:-1] + "ies" if words.endswith("y") else words + "s"


def _number(m: re.Match[str]) -> str:
    spoken = spell(m.group(2), negative=bool(m.group(1)))
    return spoken + " " if m.group(3) else spoken  # "4K" -> "four K"


def normalize(text: str) -> str:
    text = _ISO_DATE.sub(_iso, text)
    text = _US_DATE.sub(_us, text)
    text = _MDY.sub(_mdy, text)
    text = _DMY.sub(_dmy, text)
    text = _TIME.sub(_time, text)
    text = _MONEY.sub(_money, text)
    text = _YUAN.sub(lambda m: f"{spell(m.group(1))} yuan", text)
    text = _PHONE.sub(lambda m: digits(m.group(0)), text)
    text = _PERCENT_RANGE.sub(
        lambda m: f"{spell(m.group(1))} to {spell(m.group(2))} percent", text)
    text = _PERCENT.sub(lambda m: f"{spell(m.group(2), bool(m.group(1)))} percent", text)
    text = _RANGE.sub(lambda m: f"{m.group(1)} to ", text)
    text = _UNIT.sub(_unit, text)
    text = _ORDINAL.sub(lambda m: ordinal(int(m.group(1))), text)
    text = _FRACTION.sub(_fraction, text)
    text = _YEAR.sub(lambda m: f"{m.group(1)} {year(int(m.group(2)))}", text)
    text = _DECADE.sub(_decade, text)
    text = _NUMBER.sub(_number, text)
    return text.replace("&", " and ")
