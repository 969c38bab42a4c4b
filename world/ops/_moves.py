"""Cells out and in: ``cells.export`` (one cell to a file, or every cell to a folder, signed
with the world's key) and ``cells.import`` (verified, signature included, then journaled).

Both name files on the world's host: the paths are absolute (a served world's working folder
is not its client's), and they are not offered over HTTP (``Operation.server_files``). An
export reads every cell and writes a file per cell, so a served world runs it off its loop on
a read-only handle; one ``World.read``, so the files are one journal position's cells."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from air.errors import InvalidArgument
from world.ops._base import Args, Context, Result, operation

__all__ = ["Export", "Exported", "Import", "Imported", "cells_export", "cells_import"]


class Export(Args):
    reducer: str = Field(description="The keyed reducer")
    out: str = Field(description="The file (one key) or folder (all) to write, absolute")
    key: Any = Field(default=None, description="One cell's key; give it or all")
    all: bool = Field(default=False, description="Every cell, as a folder tree")
    force: bool = Field(default=False, description="Write over a file or a folder not empty")


class Exported(Result):
    cells: int = Field(description="Cells written")
    notices: list[str] = Field(default_factory=list, description="The reading handle's notices")


def _absolute(name: str, path: str) -> Path:
    if not Path(path).is_absolute():
        raise InvalidArgument(name, path, "must be an absolute path")
    return Path(path)


@operation("cells.export", off_loop=lambda _args: True, server_files=True)
def cells_export(ctx: Context, args: Export) -> Exported:
    """Export one cell to a self-describing CBOR file, or every cell to a folder, signed."""
    from world.moves import export_all, export_cell

    out = _absolute("out", args.out)
    if args.all == (args.key is not None):
        raise InvalidArgument("key", repr(args.key), "give exactly one of key or all")
    world = ctx.world
    if args.all:
        count = export_all(world, args.reducer, out, force=args.force)
    else:
        export_cell(world, args.reducer, args.key, out, force=args.force)
        count = 1
    return Exported(cells=count, notices=list(world.notices) if ctx.served else [])


class Import(Args):
    path: str = Field(description="An exported cell file or folder, absolute")
    trust: bool = Field(default=False, description="Take unsigned files and any valid signer")
    trust_keys: list[str] = Field(default_factory=list, description="Public keys (hex) to take")
    force: bool = Field(default=False, description="Replace newer cells, or another world's")


class Imported(Result):
    cells: int = Field(description="Cells imported")


@operation("cells.import", writes=True, server_files=True)
def cells_import(ctx: Context, args: Import) -> Imported:
    """Import exported cells: verified first, then journaled so replay reproduces them."""
    from world.moves import Trust, import_path

    path = _absolute("path", args.path)
    trust = Trust.of(any_signer=args.trust, keys_hex=list(args.trust_keys))
    ctx.catch_up()
    return Imported(cells=import_path(ctx.world, path, trust, force=args.force))
