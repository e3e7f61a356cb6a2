"""The SQLite shortcut for UTC times (``UTCDateTime.fast_bind_processor``) stores exactly the text
SQLAlchemy's own processors would, for every datetime, and refuses what they refuse."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from ongridd.store.schema import UTCDateTime

SQLITE = sa.create_engine("sqlite://").dialect
_zones = st.one_of(st.none(), st.just(timezone.utc),
                   st.integers(-23 * 60, 23 * 60).map(lambda m: timezone(timedelta(minutes=m))))


def _general(dialect):
    typ = UTCDateTime()
    impl = typ.dialect_impl(dialect)
    return impl.bind_processor(dialect)


@settings(max_examples=1000, deadline=None)
@given(st.datetimes(min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31)), _zones)
def test_the_shortcut_stores_what_sqlalchemy_would(moment, zone):
    value = moment.replace(tzinfo=zone) if zone is not None else moment
    fast = UTCDateTime().fast_bind_processor(SQLITE)
    assert fast(value) == _general(SQLITE)(value)


def test_none_and_what_is_not_a_datetime_go_the_general_way():
    fast = UTCDateTime().fast_bind_processor(SQLITE)
    general = _general(SQLITE)
    assert fast(None) is None and general(None) is None
    for bad in ("2026-01-01", 1767225600, date(2026, 1, 2)):
        with pytest.raises(Exception) as expected:
            general(bad)
        with pytest.raises(expected.type):
            fast(bad)


def test_no_shortcut_off_sqlite():
    from sqlalchemy.dialects import postgresql

    assert UTCDateTime().fast_bind_processor(postgresql.dialect()) is None


@settings(max_examples=1000, deadline=None)
@given(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)), _zones)
def test_iso_text_is_the_strftime_text_for_every_time(moment, zone):
    from ongridd.store.rows import iso, to_utc

    value = moment.replace(tzinfo=zone) if zone is not None else moment
    assert iso(value) == to_utc(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert iso(None) is None


def test_times_in_the_same_second_and_across_one_store_what_sqlalchemy_would():
    # the shortcut reuses the text up to the seconds from the call before in the same second
    fast, general = UTCDateTime().fast_bind_processor(SQLITE), _general(SQLITE)
    start = datetime(2026, 12, 7, 23, 59, 58, 999_998, tzinfo=timezone.utc)
    moments = [start + timedelta(microseconds=step) for step in (0, 1, 2, 3, 1_000_001, 1_000_002)]
    moments += [start.astimezone(timezone(timedelta(hours=-5))), start.replace(tzinfo=None),
                datetime(999, 1, 1, tzinfo=timezone.utc), start]
    for moment in moments:
        assert fast(moment) == general(moment), moment
