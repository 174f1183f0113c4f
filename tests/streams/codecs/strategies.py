"""Hypothesis strategies for the wire values of the compaction topics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import strategies as st

IDS = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._:@-]{0,20}\Z")
ENVIRONMENTS = st.from_regex(r"\A[a-z0-9][a-z0-9_-]{0,10}\Z")
TIMESTAMPS = st.datetimes(
    min_value=datetime(2000, 1, 1),
    max_value=datetime(2100, 1, 1),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-5))]),
).map(lambda when: when.isoformat().replace("+00:00", "Z"))
OFFSETS = st.integers(min_value=0, max_value=2**40)
EXTRAS = st.dictionaries(
    st.from_regex(r"\Ax_[a-z]{1,8}\Z"),
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20)),
    max_size=3,
)


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    """A valid `compaction.requested` value, sometimes with fields the schema does not know."""
    first = draw(OFFSETS)
    return {
        "schema_version": 1,
        "environment": draw(ENVIRONMENTS),
        "account_id": draw(IDS),
        "agent_id": draw(IDS),
        "user_id": draw(st.none() | IDS),
        "thread_id": draw(IDS),
        "from_offset": first,
        "to_offset": first + draw(st.integers(min_value=0, max_value=10_000)),
        "tokens": draw(st.integers(min_value=0, max_value=10**6)),
        "messages": draw(st.integers(min_value=1, max_value=10**4)),
        "reason": draw(st.sampled_from(["tokens", "messages"])),
        "requested_at": draw(TIMESTAMPS),
        **draw(EXTRAS),
    }
