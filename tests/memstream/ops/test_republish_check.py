import pytest

from core.errors import InvalidInput
from memstream.ops.republish import check_from_seq


@pytest.mark.parametrize(("from_seq", "last_seq"), [(0, 0), (0, 5), (1, 5), (5, 5)])
def test_valid(from_seq: int, last_seq: int) -> None:
    """Accepted (returns None), and the next seq past the journal's last is the first refused."""
    assert check_from_seq(from_seq, last_seq) is None  # type: ignore[func-returns-value]
    with pytest.raises(InvalidInput):
        check_from_seq(last_seq + 1, last_seq)


@pytest.mark.parametrize(
    ("from_seq", "last_seq", "says"),
    [
        (-1, 5, "must be >= 0"),
        (6, 5, "past the journal's last seq 5: nothing to republish; use 0..5"),
        (1, 0, "(the journal is empty)"),
    ],
)
def test_invalid(from_seq: int, last_seq: int, says: str) -> None:
    with pytest.raises(InvalidInput) as info:
        check_from_seq(from_seq, last_seq)
    assert info.value.field == "from_seq"
    assert says in info.value.message
