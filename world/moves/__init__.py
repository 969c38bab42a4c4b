"""Cells moving in and out of a world: export to self-describing cell files, import from them,
and the migration of a v1 reducer (one map in its state) to one cell per key.

Invariants:
- Every cell that comes in is journaled (``cell.imported``) and applied the same way live and
  on replay, so a world that imported cells replays exactly.
- Everything is verified before anything is journaled (checksums, signatures and whether the
  import trusts their signers, the target's schemas and module); then all cells go in one
  commit.
- A migration builds the new world beside the old one, checks that it replays exactly, and
  swaps it in by renames (``world._directory.swap_in``); the old world is kept whole as a
  backup. A kill at any point leaves the old world or the new one.

Parts: ``_cellfiles`` (export and import of cell files), ``_signing`` (who signed a cell
file and whom an import trusts), ``_migrate`` (the migration).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from world.moves._cellfiles import (
        CELL_FILE_BYTES_MAX,
        EXPORT_FORMAT,
        CellFile,
        check_export_target,
        export_all,
        export_cell,
        import_path,
        journal_cells,
        journal_records,
        read_cell_file,
        read_tree,
    )
    from world.moves._migrate import MigrationPlan, migrate_cells, plan_migration
    from world.moves._signing import ExportKey, Trust, world_signer

__all__ = [
    "CELL_FILE_BYTES_MAX",
    "EXPORT_FORMAT",
    "CellFile",
    "ExportKey",
    "MigrationPlan",
    "Trust",
    "check_export_target",
    "export_all",
    "export_cell",
    "import_path",
    "journal_cells",
    "journal_records",
    "migrate_cells",
    "plan_migration",
    "read_cell_file",
    "read_tree",
    "world_signer",
]

_WHERE: dict[str, str] = {
    name: module
    for module, names in (
        (
            "world.moves._cellfiles",
            (
                "CELL_FILE_BYTES_MAX",
                "EXPORT_FORMAT",
                "CellFile",
                "check_export_target",
                "export_all",
                "export_cell",
                "import_path",
                "journal_cells",
                "journal_records",
                "read_cell_file",
                "read_tree",
            ),
        ),
        ("world.moves._signing", ("ExportKey", "Trust", "world_signer")),
        (
            "world.moves._migrate",
            (
                "MigrationPlan",
                "migrate_cells",
                "plan_migration",
            ),
        ),
    )
    for name in names
}


def __getattr__(name: str) -> Any:
    """The names of ``__all__``, imported on first use (``world._face``)."""
    from world._face import export

    return export("world.moves", _WHERE, name, globals())
