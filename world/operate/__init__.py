"""Operating a world: its plan runs and dead letters as an operator sees and acts on them
(``world runs``, ``world dead-letters``, and the summaries ``world run`` and ``world step``
end with).

Invariants:
- Reading changes nothing: listings come from the kernel (live runs, kept letters) and from the
  journal (ended runs, a run's effects and receipts), never from a derived file that could lag.
- Acting is journaled: a cancel (``run.cancelled``) through ``cancel_run``; a retry or a drop
  of a dead letter through ``World.retry_dead_letter`` / ``World.drop_dead_letter``. Each is
  applied by the kernel as replay applies it.

Parts: ``_runs`` (listing, showing and cancelling runs; what a world waits for; a command's
summary; running while saying which far timer it waits for), ``_deadletters`` (the kept letters
with their values read through the AIR).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from world.operate._deadletters import dead_letter, dead_letters
    from world.operate._runs import (
        FAR_TIMER_S,
        RUN_STATUSES,
        RunMark,
        cancel_run,
        parse_run_id,
        queued_seqs,
        run_detail,
        run_mark,
        run_summary,
        run_telling,
        runs_list,
        waits,
    )

__all__ = [
    "FAR_TIMER_S",
    "RUN_STATUSES",
    "RunMark",
    "cancel_run",
    "dead_letter",
    "dead_letters",
    "parse_run_id",
    "queued_seqs",
    "run_detail",
    "run_mark",
    "run_summary",
    "run_telling",
    "runs_list",
    "waits",
]

_WHERE: dict[str, str] = {
    name: module
    for module, names in (
        ("world.operate._deadletters", ("dead_letter", "dead_letters")),
        (
            "world.operate._runs",
            (
                "FAR_TIMER_S",
                "RUN_STATUSES",
                "RunMark",
                "cancel_run",
                "parse_run_id",
                "queued_seqs",
                "run_detail",
                "run_mark",
                "run_summary",
                "run_telling",
                "runs_list",
                "waits",
            ),
        ),
    )
    for name in names
}


def __getattr__(name: str) -> Any:
    """The names of ``__all__``, imported on first use (``world._face``)."""
    from world._face import export

    return export("world.operate", _WHERE, name, globals())
