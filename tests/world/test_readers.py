"""Readers survive checkpoints (issue 20, item 5), and two smaller items of the same issue.

A reader is open on a world while a writer (another ``World`` handle in this process: handles
lock as processes do) sends, runs and checkpoints, every cell's state out of line
(``small_inline``) and every cell changed each round, so that each checkpoint collects the
objects the reader's checkpoint used. Everything is interleaved by hand: the writer acts
between two reads of the reader (or, for an open, inside it through a patched step), never in
a thread. Then every read the reader makes (states, cells, ``info``, time travel, tails, pages
of ``world cells ls``) gives the right values and ``CheckpointMoved`` never escapes.

Also here: ``world journal verify --repair`` reports exactly the records it cut when the damage
is in an earlier segment of several (issue 20, item 3), and a world whose journal folder is
empty, missing or a file says so (item 4).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.main import app
from kernel.errors import JournalCorrupt
from world import StorageError, World
from world._recovery import Recovery
from world._world import READER_RETRIES_MAX
from world.cellstore import FileCellStore
from world.history import CellHistory, cell_at, cell_key
from world.journal import FRAME_HEADER_BYTES, SEGMENT_HEADER_BYTES, FileJournal

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

runner = CliRunner()
CELLS = 60
KEYS = [f"k{i}" for i in range(CELLS)]
TAIL_KEYS = KEYS[:3]
"""Cells the writer changes after its checkpoint and before the reader opens (the reader
re-executes those steps in memory, and keeps their states cached)."""


@pytest.fixture(autouse=True)
def small_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counter states go out of line (one CAS object each), so a checkpoint that changes every
    cell collects every state object the previous one used."""
    defaults = dict(FileCellStore.__init__.__kwdefaults__ or {})
    monkeypatch.setattr(
        FileCellStore.__init__, "__kwdefaults__", {**defaults, "cell_inline_bytes_max": 17}
    )


@pytest.fixture
def world_path(tmp_path: Path) -> Path:
    """A checkpointed world of ``CELLS`` counters."""
    path = tmp_path / "w"
    with World.create(path, COUNTER_AIR) as world:
        world.send_many([(EVENT, add(key, 1000 + i)) for i, key in enumerate(KEYS)])
        world.run_until_idle()
        world.snapshot()
    return path


def move_on(writer: World, n: int = 1) -> None:
    """One round of the writer: every cell changes, then a checkpoint (which collects)."""
    writer.send_many([(EVENT, add(key, n)) for key in KEYS])
    writer.run_until_idle()
    writer.snapshot()


def tail_after_checkpoint(writer: World) -> None:
    """Committed records after the checkpoint, for a reader to re-execute at its open."""
    writer.send_many([(EVENT, add(key, 7)) for key in TAIL_KEYS])
    writer.run_until_idle()


def states(world: World) -> dict[str, Any]:
    return {key: world.state(COUNTER, key) for key in KEYS}


def used_objects(reader: World) -> set[bytes]:
    store = reader.store
    assert isinstance(store, FileCellStore)
    return store.reachable_objects()


def collected(path: Path, objects: set[bytes]) -> set[bytes]:
    """Which of ``objects`` are no longer in the world's CAS."""
    cas = path / "cas"
    return {raw for raw in objects if not (cas / raw.hex()[:2] / raw.hex()[2:]).exists()}


def cli_json(*args: object) -> Any:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# --- reads through a read-only handle ----------------------------------------------------------


def test_a_reader_reads_right_states_after_checkpoints_collected_what_its_own_used(
    world_path: Path,
) -> None:
    with World.open(world_path) as writer:
        tail_after_checkpoint(writer)
        with World.open(world_path, readonly=True) as reader:
            before = states(writer)
            used = used_objects(reader)  # reads every shard, caches nothing
            move_on(writer, 1)
            move_on(writer, 2)
            assert len(collected(world_path, used)) >= CELLS  # every state object, and more
            # The tail's cells are cached from the reader's open; any other is read from disk,
            # finds its state collected, and the reader reopens at the writer's checkpoint.
            untouched = [key for key in KEYS if key not in TAIL_KEYS]
            assert reader.state(COUNTER, untouched[0]) == writer.state(COUNTER, untouched[0])
            assert states(reader) == states(writer) != before
            assert reader.journal.seq_next == writer.journal.seq_next
            assert reader.notices == []


def test_an_iteration_of_cells_goes_on_after_the_last_cell_it_gave_across_checkpoints(
    world_path: Path,
) -> None:
    with World.open(world_path) as writer:
        tail_after_checkpoint(writer)
        with World.open(world_path, readonly=True) as reader:
            before = states(writer)
            cells = reader.cells(COUNTER)
            first = [next(cells) for _ in range(5)]
            move_on(writer, 1)
            move_on(writer, 2)
            after = states(writer)
            rest = list(cells)
    hashes = [view.key_hash for view in first + rest]
    assert hashes == sorted(hashes)  # key-hash order, each cell once, none skipped
    assert len(set(hashes)) == len(hashes) == CELLS
    assert all(view.state == before[view.key] for view in first)
    assert all(view.state == after[view.key] for view in rest)
    assert before != after


def test_info_after_checkpoints_is_one_view_at_the_writers_position(world_path: Path) -> None:
    with World.open(world_path) as writer, World.open(world_path, readonly=True) as reader:
        move_on(writer, 1)
        move_on(writer, 2)
        shown = reader.info()
        assert shown["journal_seq_next"] == writer.journal.seq_next
        assert shown["steps_total"] == writer.kernel.steps_total
        assert shown["reducers"][COUNTER]["cells"] == CELLS
        assert reader.cell_count(COUNTER) == CELLS
        assert states(reader) == states(writer)


def test_a_read_that_keeps_meeting_new_checkpoints_rebuilds_from_the_journal_in_memory(
    world_path: Path,
) -> None:
    """READER_RETRIES_MAX, hit: the writer checkpoints inside every attempt of one read."""
    with World.open(world_path) as writer, World.open(world_path, readonly=True) as reader:
        key_cbor = reader.key_cbor(COUNTER, "k7")
        seen: list[Any] = []

        def read_while_the_writer_checkpoints() -> bytes | None:
            seen.append(writer.state(COUNTER, "k7"))
            move_on(writer, 1)
            return reader.kernel.state_of(COUNTER, key_cbor)

        found = reader.read(read_while_the_writer_checkpoints)
        assert len(seen) == READER_RETRIES_MAX + 2  # the first try, the reopens, then memory
        assert found == reader.kernel.state_of(COUNTER, key_cbor)
        assert reader.state(COUNTER, "k7") == seen[-1]  # the journal when it rebuilt
        assert not isinstance(reader.store, FileCellStore)
        assert len(reader.notices) == 1
        assert "rebuilt from the journal in memory" in reader.notices[0]
        shown = states(reader)
        move_on(writer, 1)  # nothing a writer does moves a store in memory
        assert states(reader) == shown


def test_an_open_that_meets_a_checkpoint_moved_under_it_reopens_in_place(
    world_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with World.open(world_path) as writer:
        tail_after_checkpoint(writer)
        replay = Recovery._replay
        calls = 0

        def replay_after_the_writer_moved_on(self: Recovery, *args: Any) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:  # between the reader's checkpoint and its replay of the tail
                move_on(writer, 1)
                move_on(writer, 2)
            replay(self, *args)

        monkeypatch.setattr(Recovery, "_replay", replay_after_the_writer_moved_on)
        with World.open(world_path, readonly=True) as reader:
            assert calls == 2  # the first replay found its objects gone; the reopen's did not
            assert reader.journal.seq_next == writer.journal.seq_next
            assert states(reader) == states(writer)


def test_time_travel_and_a_cells_history_read_on_across_checkpoints(world_path: Path) -> None:
    with World.open(world_path) as writer:
        air = writer.air
        where = cell_key(air, COUNTER, "k3")
        journal = FileJournal(world_path / "journal", readonly=True)
        history = CellHistory(air, where)
        entries = list(history.read(journal, 0))
        seq = writer.journal.seq_next - 1
        then = writer.state(COUNTER, "k3")
        for n in (1, 2, 3):
            move_on(writer, n)
            assert cell_at(world_path, COUNTER, "k3", seq).state == then
            now = writer.journal.seq_next - 1
            assert cell_at(world_path, COUNTER, "k3", now).state == writer.state(COUNTER, "k3")
            journal.refresh()
            entries += history.read(journal, entries[-1].record.seq + 1)
        journal.close()
        seqs = [entry.record.seq for entry in entries]
        assert seqs == sorted(set(seqs))
        steps = [entry for entry in entries if entry.role == "step"]
        assert len(steps) == 4  # its first event, then one a round
        assert all(entry.source is not None for entry in steps)


# --- the CLI -------------------------------------------------------------------------------


def interleave(monkeypatch: pytest.MonkeyPatch, between: Callable[[], None]) -> None:
    """``--follow``'s wait runs ``between`` (the writer's turn) once, then stops the command as
    Ctrl-C would."""
    waits = iter([between])

    def wait(_seconds: float) -> None:
        turn = next(waits, None)
        if turn is None:
            raise KeyboardInterrupt
        turn()

    monkeypatch.setattr("cli.journal.time.sleep", wait)


def json_lines(output: str) -> Iterator[Any]:
    return (json.loads(line) for line in output.splitlines() if line.startswith("{"))


def test_journal_tail_follow_prints_every_record_once_across_checkpoints(
    world_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with World.open(world_path) as writer:
        interleave(monkeypatch, lambda: (move_on(writer, 1), move_on(writer, 2)))
        result = runner.invoke(app, ["journal", "tail", str(world_path), "--follow"])
        assert result.exit_code == 130, result.output
        seqs = [line["seq"] for line in json_lines(result.stdout)]
        assert seqs == list(range(writer.journal.seq_next))


def test_cells_tail_follow_goes_on_where_it_was_across_checkpoints(
    world_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with World.open(world_path) as writer:
        interleave(monkeypatch, lambda: (move_on(writer, 1), move_on(writer, 2)))
        result = runner.invoke(
            app, ["cells", "tail", str(world_path), COUNTER, '"k3"', "--follow", "--json"]
        )
        assert result.exit_code == 130, result.output
        lines = list(json_lines(result.stdout))
        seqs = [line["seq"] for line in lines]
        assert seqs == sorted(set(seqs))
        assert [line["role"] for line in lines] == ["input", "step"] * 3


def test_cells_ls_pages_with_a_writer_checkpointing_between_them(world_path: Path) -> None:
    with World.open(world_path) as writer:
        tail_after_checkpoint(writer)
        listing = ("cells", "ls", world_path, COUNTER, "--limit", 25, "--json")
        first = cli_json(*listing)
        before = states(writer)
        move_on(writer, 1)
        move_on(writer, 2)
        after = states(writer)
        pages = [first]
        while "next_after" in pages[-1]:
            pages.append(cli_json(*listing, "--after", json.dumps(pages[-1]["next_after"])))
    shown = [cell for page in pages for cell in page["cells"]]
    assert sorted(cell["key"] for cell in shown) == sorted(KEYS)  # none skipped, none twice
    assert all(cell["state"] == before[cell["key"]] for cell in first["cells"])
    assert all(cell["state"] == after[cell["key"]] for page in pages[1:] for cell in page["cells"])
    assert before != after


# --- world journal verify --repair: the count it cut (item 3) ----------------------------------


def frame_offsets(segment: Path) -> list[int]:
    data, offsets, offset = segment.read_bytes(), [], SEGMENT_HEADER_BYTES
    while offset + FRAME_HEADER_BYTES <= len(data):
        offsets.append(offset)
        offset += FRAME_HEADER_BYTES + struct.unpack_from("<I", data, offset)[0]
    return offsets


def small_segments_world(path: Path) -> Path:
    """A world whose journal is many small segments."""
    with World.create(path, COUNTER_AIR) as world:
        world.journal.close()
        world.journal = FileJournal(path / "journal", segment_bytes_max=600)
        world.kernel.journal = world.journal
        for n in range(40):
            world.send(EVENT, add(f"k{n % 3}", n + 1))
    return path


@pytest.mark.parametrize(
    ("where", "byte"),
    [
        pytest.param("length", 0, id="a-damaged-length-stops-the-frames"),
        pytest.param("payload", FRAME_HEADER_BYTES + 2, id="a-damaged-payload"),
    ],
)
def test_repair_reports_exactly_the_records_it_cut_across_segments(
    tmp_path: Path, where: str, byte: int
) -> None:
    w = small_segments_world(tmp_path / "w")
    segments = sorted((w / "journal").glob("*.log"))
    assert len(segments) > 4
    with FileJournal(w / "journal", readonly=True) as journal:
        records = journal.seq_next
    damaged = segments[1]
    offset = frame_offsets(damaged)[1]
    data = bytearray(damaged.read_bytes())
    data[offset + byte] ^= 0x01
    data[offset + byte + 1] ^= 0x01  # two bytes: more than the seal mends (and an input)
    damaged.write_bytes(bytes(data))
    kept = int(damaged.name.removesuffix(".log")) + 1  # the damaged frame is the second
    result = runner.invoke(app, ["journal", "verify", str(w), "--repair"])
    assert result.exit_code == 0, result.output
    cut = records - kept
    assert f"cut {cut} record(s) (seq {kept}..{records - 1})," in result.stdout
    with FileJournal(w / "journal", readonly=True) as journal:
        assert journal.seq_next == kept


# --- a journal folder that is empty, missing or a file (item 4) --------------------------------


@pytest.mark.parametrize("readonly", [True, False])
def test_an_empty_journal_folder_is_a_journal_without_its_first_segment(
    world_path: Path, readonly: bool
) -> None:
    for segment in (world_path / "journal").iterdir():
        segment.unlink()
    with pytest.raises(JournalCorrupt) as caught:
        World.open(world_path, readonly=readonly)
    assert (caught.value.segment, caught.value.seq, caught.value.reason) == (
        "00000000000000000000.log",
        0,
        "segment_gap",
    )
    shown = runner.invoke(app, ["info", str(world_path), "--json"])
    assert shown.exit_code == 1
    assert json.loads(shown.stdout)["error"] == "JournalCorrupt"
    verified = runner.invoke(app, ["journal", "verify", str(world_path)])
    assert verified.exit_code == 1
    assert "no segment at all" in verified.output
    assert "--repair" not in verified.output  # nothing to cut back to: a cut cannot help
    report = json.loads(runner.invoke(app, ["journal", "verify", str(world_path), "--json"]).stdout)
    assert (report["ok"], report["records"], report["problem"]["reason"]) == (
        False,
        0,
        "segment_gap",
    )
    repaired = runner.invoke(app, ["journal", "verify", str(world_path), "--repair"])
    assert repaired.exit_code == 1
    assert "JournalCorrupt" in repaired.output


@pytest.mark.parametrize(
    ("replace", "errno_name"),
    [
        pytest.param(lambda journal: journal.write_text("not a folder"), "ENOTDIR", id="a-file"),
        pytest.param(lambda journal: None, "ENOENT", id="missing"),
    ],
)
def test_a_journal_folder_that_is_a_file_or_missing_is_named_not_called_not_a_world(
    world_path: Path, replace: Callable[[Path], None], errno_name: str
) -> None:
    journal = world_path / "journal"
    for segment in journal.iterdir():
        segment.unlink()
    journal.rmdir()
    replace(journal)
    for readonly in (True, False):
        with pytest.raises(StorageError) as caught:
            World.open(world_path, readonly=readonly)
        assert (caught.value.path, caught.value.errno_name) == (str(journal), errno_name)
    for command in (
        ["info", str(world_path), "--json"],
        ["journal", "tail", str(world_path)],
        ["journal", "verify", str(world_path)],
        ["journal", "verify", str(world_path), "--repair"],
    ):
        shown = runner.invoke(app, command)
        assert shown.exit_code == 1
        assert "StorageError" in shown.output
        assert "NotAWorld" not in shown.output
    fields = json.loads(runner.invoke(app, ["info", str(world_path), "--json"]).stdout)["fields"]
    assert (fields["path"], fields["errno_name"]) == (str(journal), errno_name)
