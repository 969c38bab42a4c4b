"""A world's past: the cell history index, time travel, forks, and replay from genesis.

``_index`` holds the history index; ``_timetravel`` a cell at a past position, its history,
and forks; ``_replay`` re-execution of the whole journal with every check.
"""
