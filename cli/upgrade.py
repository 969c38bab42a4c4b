"""``world upgrade propose|ls|show|approve|apply``: propose a new AIR to a world, read its
proposals, approve and apply one (``world.gov``). A proposal is validated as a whole and
against the world, and journaled with its diff; nothing the world runs changes until it is
applied, in one journaled record: new cells and runs take the new era, existing ones keep
theirs (``world cells upgrade`` moves cells)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.common import answers, console, emit_json, handle_errors
from cli.core import ModuleOpt, asking, module_bindings

if TYPE_CHECKING:
    from air.errors import ManifestError

__all__ = ["upgrade_app"]

upgrade_app = typer.Typer(
    help="Propose a new AIR to a world, list and show its proposals, approve and apply one",
    no_args_is_help=True,
)

DirArg = Annotated[Path, typer.Argument(help="The world directory")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output")]
IdArg = Annotated[int, typer.Argument(help="The proposal's id (its seq)")]


@upgrade_app.command("propose")
def propose(
    directory: DirArg,
    air: Annotated[Path, typer.Option("--air", help="The new AIR: a folder or one file")],
    note: Annotated[str | None, typer.Option("--note", help="Why: kept with it")] = None,
    module: ModuleOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Validate the AIR at --air against the world and journal it as a proposal with its diff
    (defs, routes, triggers, grants, policy; per reducer: wasm, state and key schema).
    --module NAME=FILE.wasm binds a module that names no wasm, as for `world init`."""

    def on_manifest(exc: ManifestError) -> None:
        from cli.validate import _print_diagnostics, diagnostics_answer

        if json_output:
            emit_json(diagnostics_answer(exc))
        else:
            _print_diagnostics(exc.diagnostics)

    with handle_errors(json_output, on_manifest):
        bindings = dict(module_bindings(module or []))
        with asking(directory) as handle:
            reply = handle.propose(air, note=note, modules=dict(bindings)).model_dump()
    _print_proposal(reply, json_output)


@upgrade_app.command("ls")
@answers
def list_proposals(directory: DirArg, json_output: JsonOpt = False) -> None:
    """Every proposal of the world, oldest first, with its approvals and whether it was
    applied."""
    with handle_errors(json_output), asking(directory, readonly=True) as handle:
        reply = handle.proposals().model_dump()
    if json_output:
        emit_json({"ok": True, **reply})
        return
    if not reply["proposals"]:
        console.print("no proposals", markup=False)
        return
    for made in reply["proposals"]:
        stale = "" if made["base"] == reply["current"] else "  (stale: the AIR changed since)"
        if made["shadows"]:
            stale += f"  (shadowed {made['shadows']} time(s))"
        if made["applied"] is not None:
            stale = f"  (applied at seq {made['applied']})"
        elif made["approvals"]:
            stale += f"  ({made['approvals']} approval{'s' if made['approvals'] > 1 else ''})"
        note = "" if made["note"] is None else f"  {made['note']}"
        console.print(
            f"{made['id']}  {_short(made['base'])} → {_short(made['manifest_hash'])}{note}{stale}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


@upgrade_app.command("show")
@answers
def show(
    directory: DirArg,
    proposal_id: IdArg,
    json_output: JsonOpt = False,
) -> None:
    """One proposal and what it changes."""
    with handle_errors(json_output), asking(directory, readonly=True) as handle:
        reply = handle.proposal(proposal_id).model_dump()
    _print_proposal(reply, json_output)


@upgrade_app.command("approve")
def approve(
    directory: DirArg,
    proposal_id: IdArg,
    note: Annotated[str | None, typer.Option("--note", help="Why: kept with it")] = None,
    json_output: JsonOpt = False,
) -> None:
    """Journal an approval of a proposal (it applies nothing)."""
    with handle_errors(json_output), asking(directory) as handle:
        reply = {"seq": handle.approve(proposal_id, note)}
    if json_output:
        emit_json({"ok": True, **reply})
    else:
        console.print(f"approved proposal {proposal_id} (seq {reply['seq']})", markup=False)


@upgrade_app.command("apply")
def apply(directory: DirArg, proposal_id: IdArg, json_output: JsonOpt = False) -> None:
    """Apply a proposal: one journaled record, after which new cells and plan runs take its
    AIR; existing cells keep stepping in their era until `world cells upgrade`; runs already
    started finish on their plan; capabilities and policy are the new ones for all. A stale
    proposal (the world's AIR changed since it was made) is refused."""
    with handle_errors(json_output), asking(directory) as handle:
        reply = handle.apply(proposal_id).model_dump()
    if json_output:
        emit_json({"ok": True, **reply})
        return
    lines = [
        f"applied proposal {proposal_id} at seq {reply['seq']}",
        f"  era {reply['manifest_hash']}",
    ]
    lines += [f"  {new} takes over the cells of {old}" for new, old in reply["successors"].items()]
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


@upgrade_app.command("shadow")
def shadow(
    directory: DirArg,
    proposal_id: IdArg,
    from_seq: Annotated[
        int | None,
        typer.Option("--from", min=1, help="Re-feed what was journaled from this seq on"),
    ] = None,
    events: Annotated[
        Path | None,
        typer.Option("--events", help="More events to feed after: JSON lines {schema, value}"),
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """Run a proposal aside against what really happened, and say what would differ: cells
    (field by field), failed steps, effects emitted or no longer emitted, runs. Nothing the
    world runs changes, and no effect reaches the outside world (receipts are reused from the
    journal, else stubbed); the report is kept in the world and journaled."""
    with handle_errors(json_output):
        extra = [] if events is None else _events(events)
        with asking(directory) as handle:
            reply = handle.shadow(proposal_id, from_seq=from_seq, events=extra).model_dump()
    if json_output:
        emit_json({"ok": True, **reply})
        return
    for line in _shadow_lines(reply):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _events(path: Path) -> list[tuple[str, Any]]:
    """``--events``: one JSON object per line, ``{"schema": ..., "value": ...}``."""
    from air import jsontext
    from air.errors import InvalidArgument

    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        doc = jsontext.loads(line, source=f"{path}:{number}")
        if (
            not isinstance(doc, dict)
            or not isinstance(doc.get("schema"), str)
            or "value" not in doc
        ):
            raise InvalidArgument(
                f"{path}:{number}", line[:80], 'a line is {"schema": ..., "value": ...}'
            )
        found.append((doc["schema"], doc["value"]))
    return found


def _shadow_lines(report: dict[str, Any]) -> list[str]:
    cells = report["cells"]
    effects = report["effects"]
    out = [
        f"shadow of proposal {report['proposal']}: seq {report['from']}..{report['head'] - 1}, "
        f"{report['inputs']} input(s) re-fed, {report['extra_events']} more",
        f"  {cells['differ']} cell(s) would differ",
    ]
    for cell in cells["shown"]:
        out.append(f"    {cell['reducer']} {json.dumps(cell['key'])}")
        out += [
            f"      {f['path']}: {json.dumps(f['real'])} → {json.dumps(f['shadow'])}"
            for f in cell["fields"]
        ]
    if report["upgrades_failed_count"]:
        out.append(f"  {report['upgrades_failed_count']} cell upgrade(s) would fail")
        out += [
            f"    {u['reducer']} {json.dumps(u['key'])}: {u['reason'].get('code')}"
            for u in report["upgrades_failed"]
        ]
    for side, said in (("new", "would fail"), ("gone", "would no longer fail")):
        lines = report["steps_failed"][side]
        if lines:
            out.append(f"  {len(lines)} step(s) {said}")
            out += [f"    {f['reducer']} {json.dumps(f['key'])}: {f['code']}" for f in lines]
    for side, said in (("new", "would be emitted"), ("gone", "would no longer be emitted")):
        lines = effects[side]
        if lines:
            out.append(f"  {len(lines)} effect(s) {said}")
            out += [f"    {_effect(e)}" for e in lines]
    out.append(
        f"  effects: {effects['reused']} receipt(s) reused from the journal, "
        f"{effects['stubbed_count']} stubbed, {len(effects['parked'])} left parked"
    )
    if report["runs"]["differ_count"]:
        out.append(f"  {report['runs']['differ_count']} run(s) would differ")
        out += [
            f"    run {r['run_id']}: {_run(r['real'])} → {_run(r['shadow'])}"
            for r in report["runs"]["differ"]
        ]
    if report["skipped"]:
        skipped = ", ".join(f"{n} {kind}" for kind, n in report["skipped"].items())
        out.append(f"  not re-fed: {skipped}")
    out.append(f"  report {report['address']} (journaled at seq {report['seq']})")
    return out


def _effect(line: dict[str, Any]) -> str:
    params = line["params"]
    what = (
        f"{params.get('method', '')} {params.get('url', '')}".strip()
        if isinstance(params, dict)
        else ""
    )
    origin = line["origin"]
    return (
        f"{line['kind']} {what} (cap {line['cap']}, from {origin.get('kind')} {origin.get('name')})"
    )


def _run(state: list[Any] | None) -> str:
    return "none" if state is None else f"{state[0]} {state[1]}"


def _print_proposal(reply: dict[str, Any], json_output: bool) -> None:
    if json_output:
        emit_json({"ok": True, **reply})
        return
    console.print(f"proposal {reply['id']}", markup=False, highlight=False)
    _print_diff(reply, reply["cells"])


def _short(address: str) -> str:
    return address[:19] + "…"


def _print_diff(made: dict[str, Any], counts: dict[str, int]) -> None:
    out = [f"  base {made['base']}", f"  new  {made['manifest_hash']}"]
    if made["note"] is not None:
        out.append(f"  note {made['note']}")
    diff: dict[str, Any] = made["diff"]
    for sign, part in (("+", "added"), ("-", "removed"), ("~", "changed")):
        for kind, names in sorted(diff[part].items()):
            out += [f"  {sign} {kind} {name}" for name in names]
    for what, lines in sorted(diff["manifest"].items()):
        out += [f"  {what}: {line}" for line in lines]
    for line in diff["reducers"]:
        out.append("  " + _reducer_line(line, counts.get(line["old"] or "")))
    for line in out:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _reducer_line(line: dict[str, Any], cells: int | None) -> str:
    from air import ReducerChange

    return ReducerChange(**line).describe(cells)
