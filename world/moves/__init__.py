"""Cells moving in and out of a world: export to cell files, import from them, migration of a
v1 reducer's map to cells.

``_cellfiles`` holds export and import; ``_migrate`` the migration.
"""
