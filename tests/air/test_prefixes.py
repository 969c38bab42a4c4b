"""Names given by a unique prefix (``world._prefixes``): what is taken and what is refused."""

from __future__ import annotations

import pytest

from air.errors import AmbiguousName, InvalidArgument, UnknownName
from world._prefixes import PREFIX_MIN, by_prefix

NAMES = ["585f911c" + "0" * 56, "585f9aaa" + "1" * 56, "9b2e" + "2" * 60, "run-7"]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (NAMES[0], NAMES[0]),  # whole
        ("blake3:" + NAMES[0], NAMES[0]),  # with the hash's algorithm in front
        ("585f911c", NAMES[0]),  # git-style
        ("585F911", NAMES[0]),  # case does not matter
        ("blake3:585f9a", NAMES[1]),
        ("9b2e", NAMES[2]),  # exactly PREFIX_MIN characters
        ("run-7", "run-7"),  # a whole name shorter than a prefix may be
        (" 9b2e2 ", NAMES[2]),  # pasted with spaces
    ],
)
def test_a_whole_name_or_a_unique_prefix_is_taken(given: str, expected: str) -> None:
    assert by_prefix("intent", given, NAMES) == expected


def test_an_ambiguous_prefix_lists_every_candidate_in_full() -> None:
    with pytest.raises(AmbiguousName) as raised:
        by_prefix("parked intent", "585f", NAMES)
    assert raised.value.candidates == sorted(NAMES[:2])
    assert str(raised.value).startswith("parked intent 585f is ambiguous: it starts 2 of them: ")
    assert NAMES[0] in str(raised.value)
    assert NAMES[1] in str(raised.value)


def test_many_candidates_are_named_up_to_twenty() -> None:
    names = [f"abcd{i:060x}" for i in range(25)]
    with pytest.raises(AmbiguousName) as raised:
        by_prefix("intent", "abcd", names)
    assert len(raised.value.candidates) == 25
    assert str(raised.value).count("abcd0") == 20
    assert "and 5 more" in str(raised.value)


def test_a_prefix_shorter_than_the_floor_is_refused_even_when_unique() -> None:
    assert PREFIX_MIN == 4
    with pytest.raises(InvalidArgument, match="at least 4 characters"):
        by_prefix("intent", "9b2", NAMES)


@pytest.mark.parametrize("given", ["", "   ", "blake3:"])
def test_nothing_given_is_refused(given: str) -> None:
    with pytest.raises(InvalidArgument):
        by_prefix("intent", given, NAMES)


@pytest.mark.parametrize("given", ["ffff", "585f911c1", "585f911d", NAMES[0] + "0", "run-77"])
def test_no_match_is_unknown_and_names_what_there_is(given: str) -> None:
    with pytest.raises(UnknownName) as raised:
        by_prefix("intent", given, NAMES)
    assert raised.value.known == NAMES


def test_no_names_at_all_is_unknown() -> None:
    with pytest.raises(UnknownName):
        by_prefix("intent", "585f911c", [])
