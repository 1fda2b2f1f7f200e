"""Dates as people and spreadsheets write them, parsed to one instant in UTC.

Accepted: ISO 8601 (``2024-01-05``, ``20240105``, ``2024-01-05T09:30``, with ``Z`` or an offset or
without a zone), numbers with ``/``, ``.`` or ``-`` (``2024/01/05``, ``05/01/2024``, ``1.5.2024``),
and English month names (``5 Jan 2024``, ``5-Jan-2024``, ``Jan 5, 2024``, ``January 5 2024``); the
non-ISO forms may end with a time of day (``14:30``, ``2:30:15 PM``). A time without a zone is
taken as UTC, and a day without a time as its midnight in UTC.

``10/01/2024`` is 10 January in most of the world and 1 October in the United States: a day and
month that could each be the other are refused as ambiguous unless a ``DateOrder`` says which
comes first (a day above 12, or the same number twice, decides by itself). Two-digit years and
spreadsheet serial numbers are refused: they are as often a year or an id as a date, and a wrong
guess would file a question under the wrong date without a word.

Light on purpose (the standard library only): the CLI's options import it at start-up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum

EXPECTED = ("expected YYYY-MM-DD (or an ISO 8601 date and time), DD/MM/YYYY or MM/DD/YYYY, "
            "5 Jan 2024, Jan 5, 2024 or 20240105")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
           "october", "november", "december")
_TIME = r"(?:[ T]+(?P<hour>\d{1,2}):(?P<minute>\d{2})(?::(?P<second>\d{2}))?\s*(?P<half>[AaPp][Mm])?)?"
_YEAR_FIRST = re.compile(r"(?P<year>\d{4})(?P<sep>[/.-])(?P<month>\d{1,2})(?P=sep)(?P<day>\d{1,2})" + _TIME)
_YEAR_LAST = re.compile(r"(?P<first>\d{1,2})(?P<sep>[/.-])(?P<then>\d{1,2})(?P=sep)(?P<year>\d+)" + _TIME)
_DAY_MONTH_NAME = re.compile(r"(?P<day>\d{1,2})[ -](?P<name>[A-Za-z]+)\.?,?[ -](?P<year>\d{4})" + _TIME)
ORDER_OPTION = "--date-format"  # what an ambiguous date's message names (the API: date_format)
_MONTH_NAME_DAY = re.compile(r"(?P<name>[A-Za-z]+)\.? (?P<day>\d{1,2}),? (?P<year>\d{4})" + _TIME)


class DateOrder(StrEnum):
    """Which comes first in a date written with numbers only: day (``dmy``) or month (``mdy``)."""

    dmy = "dmy"
    mdy = "mdy"


def date_hint(order: DateOrder | None) -> str:
    """How to write a date for an index that reads ``order``: ISO always, and its own order where
    it has one (what a date box suggests)."""
    own = {DateOrder.dmy: "DD/MM/YYYY", DateOrder.mdy: "MM/DD/YYYY"}.get(order)
    return f"YYYY-MM-DD or {own}" if own else "YYYY-MM-DD"


class DateValueError(ValueError):
    """A value that is not a date; the message says why and what is expected."""


@dataclass(frozen=True)
class ParsedDate:
    moment: datetime  # in UTC
    whole_day: bool  # no time of day was given: the value means the whole day


def parse_date(text: str, order: DateOrder | None = None, order_option: str = ORDER_OPTION) -> ParsedDate:
    """``text`` as a date (see the module docstring); DateValueError when it is none, or an
    ambiguous day/month without ``order`` (the message names ``order_option``, the option or
    parameter that gives it)."""
    value = text.strip()
    parsed = _iso(value)
    if parsed is None:
        parsed = _spreadsheet(value, order, order_option)
    if parsed is None:
        raise DateValueError(f"is not a date ({EXPECTED})")
    return parsed


def _iso(value: str) -> ParsedDate | None:
    if not re.match(r"\d{4}", value):  # fromisoformat would also take "1:30" as a time
        return None
    for reader, whole_day in ((date.fromisoformat, True), (datetime.fromisoformat, False)):
        try:
            moment = reader(value)
        except ValueError:
            continue
        return _in_utc(datetime(moment.year, moment.month, moment.day) if whole_day else moment, whole_day)
    return None


def _spreadsheet(value: str, order: DateOrder | None, order_option: str) -> ParsedDate | None:
    """The non-ISO forms; None when ``value`` has none of their shapes."""
    if match := _YEAR_FIRST.fullmatch(value):
        year, month, day = int(match["year"]), int(match["month"]), int(match["day"])
    elif match := _YEAR_LAST.fullmatch(value):
        if len(match["year"]) != 4:
            raise DateValueError("has no four-digit year (write the year in full, e.g. 2024)")
        year = int(match["year"])
        day, month = _day_and_month(int(match["first"]), int(match["then"]), year, order, order_option)
    elif match := _DAY_MONTH_NAME.fullmatch(value) or _MONTH_NAME_DAY.fullmatch(value):
        year, month, day = int(match["year"]), _month_number(match["name"]), int(match["day"])
    else:
        return None
    try:
        moment = datetime(year, month, day, *_time_of_day(match))
    except ValueError as err:
        raise DateValueError(f"is not a date ({err})") from None
    return _in_utc(moment, match["hour"] is None)


def _day_and_month(first: int, second: int, year: int, order: DateOrder | None,
                   order_option: str) -> tuple[int, int]:
    """(day, month) of ``first/second/year``: by ``order``, else by whichever reading is a date."""
    if order is DateOrder.dmy:
        return first, second
    if order is DateOrder.mdy:
        return second, first
    if first == second or first > 12:
        return first, second
    if second > 12:
        return second, first
    raise DateValueError(f"is ambiguous ({first} {_MONTHS[second - 1].title()} or {second} "
                         f"{_MONTHS[first - 1].title()} {year}): give {order_option} dmy or mdy")


def _month_number(name: str) -> int:
    word = name.lower()
    for number, month in enumerate(_MONTHS, start=1):
        if len(word) >= 3 and (month.startswith(word) or (word == "sept" and number == 9)):
            return number
    raise DateValueError(f"has no month called {name!r} ({EXPECTED})")


def _time_of_day(match: re.Match[str]) -> tuple[int, int, int]:
    if match["hour"] is None:
        return 0, 0, 0
    hour, minute, second = int(match["hour"]), int(match["minute"]), int(match["second"] or 0)
    if match["half"]:
        if not 1 <= hour <= 12:
            raise DateValueError(f"has hour {hour} with {match['half'].upper()} (1 to 12)")
        hour = hour % 12 + (12 if match["half"].lower() == "pm" else 0)
    return hour, minute, second


def _in_utc(moment: datetime, whole_day: bool) -> ParsedDate:
    try:
        utc = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:  # an offset that moves year 1 or 9999 out of range
        raise DateValueError("is out of the range of dates (years 1 to 9999 in UTC)") from None
    return ParsedDate(utc, whole_day)


def date_window(since: str | None, until: str | None, order: DateOrder | None = None,
                order_option: str = ORDER_OPTION) -> tuple[datetime | None, datetime | None]:
    """[start, end) in UTC of the dates from ``since`` to ``until``, both inclusive (``until`` as a
    day includes all of it); None leaves that end open. DateValueError names the bound that is
    not a date."""
    start = _bound("since", since, order, order_option).moment if since is not None else None
    end = None
    if until is not None:
        last = _bound("until", until, order, order_option)
        step = timedelta(days=1) if last.whole_day else timedelta(microseconds=1)
        if last.moment <= datetime.max.replace(tzinfo=UTC) - step:  # else: the last day there is
            end = last.moment + step
    return start, end


def _bound(name: str, value: str, order: DateOrder | None, order_option: str) -> ParsedDate:
    try:
        return parse_date(value, order, order_option)
    except DateValueError as err:
        raise DateValueError(f"{name} {value!r} {err}") from None
