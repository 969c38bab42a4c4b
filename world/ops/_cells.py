"""A keyed reducer's cells: ``cells.ls`` (a page, sorted by key), ``cells.show`` (one cell,
now or right after a journal position), ``cells.tail`` (a page of one cell's history) and
``cells.upgrade`` (cells moved to the current era).

``cells.show`` with ``at`` re-executes the cell's steps up to that position
(``world.history.cell_at``): it runs off a served world's loop, on a read-only handle.
``cells.tail`` is paged as ``journal.tail`` is (``world.ops._journal``); where the history index
serves the rest of the pass within ``SCAN_RECORDS_MAX`` record reads (``CellHistory.indexed``), a
page reads those records instead of the next ``SCAN_RECORDS_MAX`` of the journal, and goes on to
the pass's end."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from air import cbor
from world.ops import _journal
from world.ops._base import Args, Context, Result, operation
from world.ops._journal import Page, Window, pass_end

__all__ = [
    "Cell",
    "CellOf",
    "CellTail",
    "CellsOf",
    "CellsPage",
    "CellsUpgrade",
    "CellsUpgraded",
    "cells_ls",
    "cells_show",
    "cells_tail",
    "cells_upgrade",
]


class CellsOf(Args):
    reducer: str = Field(description="The keyed reducer")
    limit: int = Field(default=100, ge=1, description="Cells in the page")
    after: Any = Field(default=None, description="Start after this key (the last of a page)")


class CellsPage(Result):
    reducer: str
    count: int = Field(description="The reducer's cells in all")
    cells: list[dict[str, Any]] = Field(
        description="{key, key_hash, state, state_hash, size, last_active, era} each, by key"
    )
    current_era: str | None = None
    next_after: Any = Field(default=None, description="When more follow: the page's last key")


@operation("cells.ls")
def cells_ls(ctx: Context, args: CellsOf) -> CellsPage:
    """A page of a keyed reducer's cells, sorted by key (canonical CBOR order)."""
    from world._views import cells_page

    ctx.catch_up()
    return CellsPage.model_validate(cells_page(ctx.world, args.reducer, args.after, args.limit))


class CellOf(Args):
    reducer: str = Field(description="The reducer")
    key: Any = Field(description="The cell's key (sugar JSON); null: an unkeyed reducer's one cell")
    at: int | None = Field(default=None, ge=0, description="Right after this journal position")


class Cell(Result):
    reducer: str
    key: Any
    state: Any = Field(description="The state (sugar JSON); null with state_cbor null: no cell")
    state_cbor: str | None = Field(description="The state's canonical CBOR, hex")
    era: str | None = Field(description="The manifest hash the cell is pinned to")
    current_era: str | None = Field(default=None, description="Now (no at): the world's era")
    at: int | None = Field(default=None, description="With at: the position asked for")
    through: int | None = Field(default=None, description="With at: the end of its tick")


@operation("cells.show", off_loop=lambda args: args.at is not None)
def cells_show(ctx: Context, args: CellOf) -> Cell:
    """One cell's state, now or (``at``) right after that journal position."""
    from world._reading import cell_key_cbor
    from world.history import cell_at

    world = ctx.world
    if args.at is not None:
        found = cell_at(world.path, args.reducer, args.key, args.at)
        return Cell(
            reducer=args.reducer,
            key=args.key,
            state=found.state,
            state_cbor=None if found.state_cbor is None else found.state_cbor.hex(),
            era=found.era,
            at=found.seq,
            through=found.seq_through,
        )
    ctx.catch_up()
    raw_key = cell_key_cbor(world.air, args.reducer, args.key)  # the errors a wrong key gets
    view = world.cell(args.reducer, args.key)
    found_now = world.kernel.cell_of(args.reducer, raw_key)
    return Cell(
        reducer=args.reducer,
        key=args.key,
        state=None if view is None else view.state,
        state_cbor=None if found_now is None else found_now[1].hex(),
        era=None if view is None else cbor.raw_to_hash(view.entry.manifest_hash),
        current_era=world.air.manifest_hash,
    )


class CellTail(Args):
    reducer: str = Field(description="The keyed reducer")
    key: Any = Field(description="The cell's key (sugar JSON)")
    from_seq: int = Field(default=0, ge=0, description="Where this page starts")
    until_seq: int | None = Field(
        default=None, ge=0, description="Where the pass ends (a page's end); none: a new pass"
    )
    raw: bool = Field(default=False, description="Values as canonical CBOR hex")
    limit: int | None = Field(default=None, ge=1, description="Entries in the page at most")


class CellHistoryPage(Result):
    entries: list[dict[str, Any]] = Field(
        description="Each as `world cells tail --json` prints it: role, the record, a step's source"
    )
    next: int = Field(description="Where the next page starts")
    end: int = Field(description="Where the pass ends")


@operation("cells.tail")
def cells_tail(ctx: Context, args: CellTail) -> CellHistoryPage:
    """A page of one cell's inputs and step outcomes, in journal order."""
    from world.history import CellHistory, cell_key
    from world.journal import FileJournal

    world = ctx.world
    history = CellHistory(world.air, cell_key(world.air, args.reducer, args.key))
    page = Page(args.limit)
    end = pass_end(ctx, args.until_seq)
    scan = _journal.SCAN_RECORDS_MAX
    upgraded = len(world.kernel.eras.history) > 1
    entries = history.indexed(world.path, world.journal, args.from_seq, end, scan, upgraded)
    if entries is not None:  # through the history index: the rest of the pass at once
        next_seq = max(args.from_seq, end)
    else:
        window = Window(world.journal, min(end, args.from_seq + scan))
        next_seq = max(args.from_seq, window.stop)
        # CellHistory reads only ``read`` (entries, and each step's source by its seq).
        journal: FileJournal = window  # type: ignore[assignment]
        entries = history.read(journal, args.from_seq)
    view = ctx.view
    for entry in entries:
        shown = {"role": entry.role, **view.render(entry.record, raw=args.raw)}
        if entry.role == "step":
            source = entry.source
            shown["source"] = None if source is None else view.render(source, raw=args.raw)
        page.add(shown)
        if page.full():
            next_seq = entry.record.seq + 1
            break
    return CellHistoryPage(entries=page.items, next=next_seq, end=end)


class CellsUpgrade(Args):
    reducer: str = Field(description="The reducer whose cells move")
    keys: list[Any] | None = Field(description="The cells' keys; null: every cell not current")


class CellsUpgraded(Result):
    upgraded: int
    already_current: int
    failed: list[dict[str, Any]] = Field(description="{key, reason} of each cell that stayed")
    records: list[int] = Field(description="The seqs of the records journaled")


@operation("cells.upgrade", writes=True)
def cells_upgrade(ctx: Context, args: CellsUpgrade) -> CellsUpgraded:
    """Move cells to the world's current era (journaled in batches)."""
    from world.gov import upgrade_cells

    ctx.catch_up()
    done = upgrade_cells(ctx.world, args.reducer, args.keys)
    return CellsUpgraded.model_validate(done.as_json())
