"""The planted bugs that once survived the whole suite, planted again one at a time.

Usage (in a clean checkout; each file is restored after its run, even on Ctrl-C):

    python tools/mutants/planted.py            # plant each bug, run its tests, expect a failure
    python tools/mutants/planted.py 3 6        # only these
    python tools/mutants/planted.py --check    # only check that every plant still applies

First the tests of the chosen plants run with nothing planted: they must pass (exit 2 if not),
so that a failure with a plant in place is the plant's doing.

A mutation tool makes its own mutants at random places; these are the bugs a review found that
the suite could not see (the first ten are the ones it named, 11 and 12 are real bugs it found,
put back; 13-20 are blind spots a later review found by planting), each a realistic slip in
code that guards a promise. For each: the file, the exact text replaced (it must occur once: a
plant that no longer applies is reported, never skipped), and the tests that must now fail. A plant in C rebuilds the native extension before
and after its run. The result table is what ``TESTING.md`` records.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Plant:
    what: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]

    @property
    def native(self) -> bool:
        return self.path.endswith(".c")


PLANTS: tuple[Plant, ...] = (
    Plant(
        "atomic_write: no directory fsync after the rename",
        "world/_fsutil.py",
        "        raise\n    fileio.fsync_dir(parent)\n",
        "        raise\n",
        ("tests/world/test_power_loss.py",),
    ),
    Plant(
        "truncate: the cut is not fsynced",
        "world/_fileio.py",
        "            os.ftruncate(fd, size)\n            os.fsync(fd)\n",
        "            os.ftruncate(fd, size)\n",
        ("tests/world/test_power_loss.py",),
    ),
    Plant(
        "cell store: objects never synced before the checkpoint commits",
        "world/cellstore/_disk.py",
        "        sync_paths(write_many_unsynced(files), dirs)\n",
        "        write_many_unsynced(files)\n",
        ("tests/world/test_power_loss.py",),
    ),
    Plant(
        "grant hosts: a suffix match",
        "kernel/_grants.py",
        "    return host == url.host and (port is None or port == url.effective_port)\n",
        "    return url.host.endswith(host) and (port is None or port == url.effective_port)\n",
        ("tests/kernel/test_grants.py",),
    ),
    Plant(
        "policy host glob: a suffix match on what follows the star",
        "kernel/_urls.py",
        "    return fnmatch.fnmatchcase(host, pattern.lower())\n",
        '    return host.endswith(pattern.lower().lstrip("*."))\n',
        ("tests/kernel/test_grants.py",),
    ),
    Plant(
        "C decoder: 255 accepted in a two-byte head (19 00 ff)",
        "kernel/native/cbor.c",
        "static const uint64_t least[4] = {24, 0x100, 0x10000, 0x100000000ull};",
        "static const uint64_t least[4] = {24, 0xff, 0x10000, 0x100000000ull};",
        ("tests/air/test_cbor_heads.py",),
    ),
    Plant(
        "budgets: an approver's denial keeps the reservation",
        "kernel/_effects.py",
        '        intent.status = "denied"\n        self._refund(intent)\n',
        '        intent.status = "denied"\n',
        ("tests/kernel/test_effect_budgets.py", "tests/world/effects/test_effects_world.py"),
    ),
    Plant(
        "budgets: a blob.put is never settled from its receipt",
        "kernel/_effects.py",
        '        return size if status == "ok" and type(size) is int and size >= 0 else 0\n',
        "        return reserved\n",
        ("tests/kernel/test_effect_budgets.py", "tests/world/effects/test_effects_world.py"),
    ),
    Plant(
        "plans: ready steps in set order (depends on PYTHONHASHSEED)",
        "kernel/_plans.py",
        "    return sorted(ready, key=lambda s: s.id)\n",
        "    by_id = {s.id: s for s in ready}\n    return [by_id[i] for i in set(by_id)]\n",
        ("tests/kernel/test_determinism.py",),
    ),
    Plant(
        "time travel: the state one step late",
        "world/history/_timetravel.py",
        "        fast = None if raw_key is None else _cell_steps_at(world, CellKey(reducer, raw_key), seq)\n",
        "        fast = None if raw_key is None else _cell_steps_at(\n"
        "            world, CellKey(reducer, raw_key), min(seq + 1, world.journal.seq_next - 1)\n"
        "        )\n",
        ("tests/world/history/test_timetravel.py", "tests/kernel/test_determinism.py"),
    ),
    Plant(
        "grant paths: a plain startswith (/api admits /apix)",
        "kernel/_urls.py",
        '    return path == prefix or path.startswith(prefix + "/")\n',
        "    return path.startswith(prefix)\n",
        ("tests/kernel/test_grants.py",),
    ),
    Plant(
        "journal verify: receipt signatures not checked",
        "world/_repair.py",
        '                if record.kind == "receipt":\n                    bad = signatures.check(record)\n',
        '                if record.kind == "receipt-never":\n                    bad = signatures.check(record)\n',
        ("tests/world/effects/test_receipt_signatures.py",),
    ),
    # The blind spots a later review found (issue 35): each passed the whole suite until the
    # test named here was written.
    Plant(
        "apply_requires approval: an approval of any proposal counts",
        "world/gov/_apply.py",
        '    if "approval" in needs and not approvals(world).get(found.id):\n',
        '    if "approval" in needs and not approvals(world):\n',
        ("tests/world/gov/test_upgrade_apply.py",),
    ),
    Plant(
        "upgrade shadow: a stale proposal is shadowed (and journaled)",
        "world/gov/_shadow.py",
        "    not_stale(world, found.id, found.base)\n",
        "",
        ("tests/world/gov/test_upgrade_shadow.py",),
    ),
    Plant(
        "atomic commit: the batch marker only for more than two records",
        "world/journal/_file.py",
        "        marked = atomic and len(self._pending) > 1\n",
        "        marked = atomic and len(self._pending) > 2\n",
        ("tests/world/test_power_loss.py",),
    ),
    Plant(
        "HTTP receipt: a failure's text not scrubbed of the secrets sent",
        "world/effects/_http.py",
        '            "body_preview": scrub.text(failed.detail)[: self.body_preview_chars],\n',
        '            "body_preview": failed.detail[: self.body_preview_chars],\n',
        ("tests/world/effects/test_secrets.py",),
    ),
    Plant(
        "HTTP receipt: response header names not scrubbed (a secret echoed as a name)",
        "world/effects/_http.py",
        "            name, value = scrub.text(name), scrub.text(value)\n",
        "            value = scrub.text(value)\n",
        ("tests/world/effects/test_secrets.py",),
    ),
    Plant(
        "secret files: readable by the group accepted (only others' bits refused)",
        "world/effects/_secrets.py",
        "            if info.st_mode & 0o077:\n",
        "            if info.st_mode & 0o007:\n",
        ("tests/world/effects/test_secrets.py",),
    ),
    Plant(
        "inspector: a cell's state rendered as HTML on the cells page",
        "cli/ui/templates/cells.html",
        "<td><pre>{{ c.state | pretty }}</pre></td>",
        "<td><pre>{{ c.state | pretty | safe }}</pre></td>",
        ("tests/cli/ui/test_ui.py",),
    ),
    Plant(
        "shadow report: reducers in set order (varies with PYTHONHASHSEED)",
        "world/gov/_shadow_report.py",
        "    for reducer in sorted(shadow_kernel.air.modules):\n",
        "    for reducer in set(shadow_kernel.air.modules):\n",
        ("tests/kernel/test_determinism.py",),
    ),
)


def check(plant: Plant) -> str | None:
    """Why ``plant`` no longer applies, or None."""
    count = (ROOT / plant.path).read_text().count(plant.old)
    return None if count == 1 else f"the text to replace occurs {count} times in {plant.path}"


def _build_native() -> None:
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )


def _pytest(tests: tuple[str, ...]) -> int:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    args = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]
    return subprocess.run(
        [*args, *tests], cwd=ROOT, env=env, capture_output=True, check=False
    ).returncode


def run(plant: Plant) -> tuple[str, float]:
    """Plant, run its tests, restore: ``killed`` (a test failed), ``SURVIVED`` or ``broken``
    (pytest could not run: collection or usage errors)."""
    path = ROOT / plant.path
    original = path.read_text()
    started = time.monotonic()
    try:
        path.write_text(original.replace(plant.old, plant.new))
        if plant.native:
            _build_native()
        returncode = _pytest(plant.tests)
    finally:
        path.write_text(original)
        if plant.native:
            _build_native()
    verdict = {0: "SURVIVED", 1: "killed"}.get(returncode, "broken")
    return verdict, time.monotonic() - started


def main(argv: list[str]) -> int:
    only_check = "--check" in argv
    chosen = [int(a) for a in argv if a.isdigit()] or list(range(1, len(PLANTS) + 1))
    failures = 0
    if not only_check:  # a kill means something only if the same tests pass unplanted
        tests = tuple(dict.fromkeys(t for n in chosen for t in PLANTS[n - 1].tests))
        if _pytest(tests) != 0:
            print(f"the tests fail with nothing planted; fix that first: {' '.join(tests)}")
            return 2
        print(f"with nothing planted, these pass: {' '.join(tests)}")
    for number in chosen:
        plant = PLANTS[number - 1]
        problem = check(plant)
        if problem is not None:
            print(f"{number:>2}  STALE     {plant.what}: {problem}")
            failures += 1
            continue
        if only_check:
            print(f"{number:>2}  applies   {plant.what}")
            continue
        verdict, seconds = run(plant)
        failures += verdict != "killed"
        print(f"{number:>2}  {verdict:<9} {plant.what}  ({seconds:.0f} s: {' '.join(plant.tests)})")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
