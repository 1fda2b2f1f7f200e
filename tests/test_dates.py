"""Dates as people and spreadsheets write them (``core.dates``): every supported rendering of a
date reads back as that date, ambiguous day/month forms follow --date-format or are refused, and
nothing else is taken for a date."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from askalike.core.dates import DateOrder, DateValueError, date_hint, date_window, parse_date

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]

# how a day is written -> (rendering, the --date-format it needs; None: none)
RENDERINGS = {
    "ISO": (lambda d: d.isoformat(), None),
    "ISO basic": (lambda d: d.strftime("%Y%m%d"), None),
    "year first with slashes": (lambda d: f"{d.year}/{d.month}/{d.day}", None),
    "DD/MM/YYYY": (lambda d: f"{d.day:02d}/{d.month:02d}/{d.year}", DateOrder.dmy),
    "D.M.YYYY": (lambda d: f"{d.day}.{d.month}.{d.year}", DateOrder.dmy),
    "MM/DD/YYYY": (lambda d: f"{d.month:02d}/{d.day:02d}/{d.year}", DateOrder.mdy),
    "M-D-YYYY": (lambda d: f"{d.month}-{d.day}-{d.year}", DateOrder.mdy),
    "5 Jan 2024": (lambda d: f"{d.day} {MONTHS[d.month - 1][:3]} {d.year}", None),
    "05-Jan-2024": (lambda d: f"{d.day:02d}-{MONTHS[d.month - 1][:3]}-{d.year}", None),
    "Jan 5, 2024": (lambda d: f"{MONTHS[d.month - 1][:3]} {d.day}, {d.year}", None),
    "January 5 2024": (lambda d: f"{MONTHS[d.month - 1]} {d.day} {d.year}", None),
    "5 JANUARY 2024": (lambda d: f"{d.day} {MONTHS[d.month - 1].upper()} {d.year}", None),
}
days = st.dates(min_value=date(1000, 1, 1), max_value=date(9999, 12, 31))


def midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


@given(day=days, rendering=st.sampled_from(sorted(RENDERINGS)))
def test_every_rendering_of_a_day_reads_back_as_that_day(day, rendering):
    render, order = RENDERINGS[rendering]
    parsed = parse_date(render(day), order)
    assert parsed.moment == midnight(day) and parsed.whole_day


@given(day=days, rendering=st.sampled_from(["DD/MM/YYYY", "D.M.YYYY", "MM/DD/YYYY", "M-D-YYYY"]))
def test_day_and_month_are_guessed_only_where_one_reading_is_possible(day, rendering):
    render, _ = RENDERINGS[rendering]
    if day.day > 12 or day.day == day.month:
        assert parse_date(render(day)).moment == midnight(day)
    else:
        with pytest.raises(DateValueError, match=r"is ambiguous .*give --date-format dmy or mdy"):
            parse_date(render(day))


@given(day=days.filter(lambda d: d.day <= 12 and d.day != d.month))
def test_the_date_format_decides_an_ambiguous_date(day):
    text = f"{day.day:02d}/{day.month:02d}/{day.year}"
    assert parse_date(text, DateOrder.dmy).moment == midnight(day)
    assert parse_date(text, DateOrder.mdy).moment == midnight(date(day.year, day.day, day.month))


@given(moment=st.datetimes(min_value=datetime(1000, 1, 2), max_value=datetime(9999, 12, 30),
                           timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)),
                                                      timezone(timedelta(hours=-8))])))
def test_an_iso_date_and_time_reads_back_as_the_same_instant(moment):
    parsed = parse_date(moment.isoformat())
    assert parsed.moment == moment and parsed.moment.tzinfo is UTC and not parsed.whole_day


@given(text=st.text(max_size=40))
def test_any_text_is_a_date_in_utc_or_a_date_value_error(text):
    try:
        parsed = parse_date(text)
    except DateValueError as err:
        assert str(err).startswith(("is ", "has "))
    else:
        assert parsed.moment.tzinfo is UTC


@pytest.mark.parametrize(("text", "expected"), [
    ("2024-01-05 14:30", datetime(2024, 1, 5, 14, 30, tzinfo=UTC)),  # no zone: UTC
    ("2024-01-05T14:30+02:00", datetime(2024, 1, 5, 12, 30, tzinfo=UTC)),
    ("25/01/2024 2:30 PM", datetime(2024, 1, 25, 14, 30, tzinfo=UTC)),
    ("Jan 5, 2024 12:15:30 am", datetime(2024, 1, 5, 0, 15, 30, tzinfo=UTC)),
    ("  Sept 5, 2024 ", datetime(2024, 9, 5, tzinfo=UTC)),
])
def test_times_of_day_and_zones(text, expected):
    assert parse_date(text).moment == expected


@pytest.mark.parametrize(("text", "message"), [
    ("10/01/24", "has no four-digit year"),
    ("45000", "is not a date"),  # a spreadsheet serial number, or an id: not guessed
    ("2024", "is not a date"),
    ("31/02/2024", r"is not a date \(day is out of range for month\)"),
    ("5 Foo 2024", "has no month called 'Foo'"),
    ("13:00 PM 5 Jan 2024", "is not a date"),
    ("25/01/2024 13:00 PM", "has hour 13 with PM"),
    ("0001-01-01T00:00+01:00", "out of the range of dates"),
])
def test_what_is_not_a_date(text, message):
    with pytest.raises(DateValueError, match=message):
        parse_date(text)


@given(day=days.filter(lambda d: d < date(9999, 12, 31)))
def test_until_a_day_takes_all_of_it_and_nothing_after(day):
    start, end = date_window(day.isoformat(), day.isoformat())
    assert start == midnight(day) and end == midnight(day + timedelta(days=1))


def test_date_window_names_the_bound_and_stays_open_past_the_last_day():
    assert date_window(None, "9999-12-31") == (None, None)
    assert date_window(None, "2024-01-05T10:00")[1] == datetime(2024, 1, 5, 10, 0, 0, 1, tzinfo=UTC)
    with pytest.raises(DateValueError, match=r"^until '10/01/2024' is ambiguous"):
        date_window("2024-01-01", "10/01/2024")


def test_a_date_box_suggests_iso_and_the_index_s_own_order():
    assert date_hint(None) == "YYYY-MM-DD"
    assert date_hint(DateOrder.dmy) == "YYYY-MM-DD or DD/MM/YYYY"
    assert date_hint(DateOrder.mdy) == "YYYY-MM-DD or MM/DD/YYYY"
