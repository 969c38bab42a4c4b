"""Names given by a unique prefix, as git takes a commit: ``world effects approve W 585f911c``.

Every command that takes an intent hash (and the run and dead-letter commands, whose ids are
hashes or seqs) reads what it is given through ``by_prefix``: the full name, or a prefix of at
least ``PREFIX_MIN`` characters that starts exactly one of the names it could be. A
``blake3:`` in front is optional and the comparison ignores case (hashes are printed in lower
case). None → ``UnknownName`` listing what there is; more than one → ``AmbiguousName`` listing
the candidates in full, so the next try can be a copy of one of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from air.errors import AmbiguousName, InvalidArgument, UnknownName

__all__ = ["PREFIX_MIN", "by_prefix"]

PREFIX_MIN: Final = 4
"""The shortest prefix read as one (git's ``core.abbrev`` floor): a shorter one would match
by accident as a world grows. A shorter name is still taken when it is a whole name."""


def _bare(name: str) -> str:
    return name.removeprefix("blake3:").lower()


def by_prefix(kind: str, given: str, names: Iterable[str]) -> str:
    """The one of ``names`` that ``given`` names (whole, or a unique prefix), as it is in
    ``names``."""
    known = list(names)
    want = _bare(given.strip())
    for name in known:
        if _bare(name) == want:
            return name
    if not want:
        raise InvalidArgument(kind, given, "give a name or a prefix of one")
    matches = [name for name in known if _bare(name).startswith(want)]
    if len(matches) == 1 and len(want) >= PREFIX_MIN:
        return matches[0]
    if len(matches) == 1:
        raise InvalidArgument(
            kind, given, f"a prefix needs at least {PREFIX_MIN} characters (it starts {matches[0]})"
        )
    if matches:
        raise AmbiguousName(kind, given, sorted(matches))
    raise UnknownName(kind, given, known)
