"""A seeded whole-world simulation: one seed drives a world through sends, runs, adapter answers,
operator acts, crashes and power cuts, and the invariants are checked after every action.

Usage:

    python tools/simulate.py --seeds 20            # seeds 0..19
    python tools/simulate.py --seed 7 --trace      # one seed, every action printed
    python tools/simulate.py --seed 7 --steps 200  # a longer script

Exit 0 when every seed holds, 1 when one fails: it prints the seed and the shortest trace
found that still fails (the recorded script shrunk by dropping chunks and single actions,
each candidate re-run from scratch, at most ``--shrink-runs`` runs). The same seed prints the
same bytes: nothing here reads the wall clock or another random source, and paths are printed
relative to the world.

The world. The bundled counter reducer (``demo/Counter@1``, keyed by text) and one plan,
``sim/fetch@1``, started by ``sim/Fetch@1 {key, n}``: an ``http.request.v2`` GET to
``http://sim.test/<key>`` whose ``authorization`` header is a secret (``defsecret``, bound to
a 0600 file outside the world), then, whatever the answer, ``Add n`` to the counter cell
``key``; the policy parks the fetches of key ``a`` for an approval. The HTTP adapter is the product's ``HttpAdapter`` with an ``httpx.MockTransport``
whose answers the seed schedules (``SimAdapter``): it holds every intent it is handed, and an
``answer`` action picks one of those held (so answers come late and out of order) and makes
the real adapter answer it, on its worker thread, while the simulation waits: 200 echoing the
secret back, 500, a connection error whose message quotes the secret, or a timeout. An intent
never answered stays in flight until a crash, after which the next loop dispatches it again.

Actions (drawn from ``random.Random(seed)``; each keeps its own random numbers, so a shrunk
script still means something): ``send`` a batch of ``Add`` and ``Fetch`` events, some with
``$id``s; ``resend`` an earlier batch as a client that lost the acknowledgement would; ``run``
the loop until only held intents are left; ``answer`` a held intent; ``decide`` (approve or
deny) a parked intent and ``cancel`` a live run,
both through the operations layer; ``dead`` (retry or drop a dead letter; a refusal, such as
retrying a failed effect's letter, is the layer's answer, not a failure); ``checkpoint``;
``crash`` (the process dies: no checkpoint, the adapter's intents are lost, the world is
reopened from disk); ``power`` (a power cut at a drawn durable operation of the next few
actions, through ``tests/powerloss.py``'s fake file layer, which keeps only what was made
durable; the world is reopened from that image); ``disk`` (EIO or ENOSPC once, at a drawn
durable operation of the next few actions, through ``world._fileio``'s fault hook: the action
may be refused with a ``WorldError``, and the process is then restarted).

Invariants, after every action (``check``) and at the end, after every held intent is answered
and the loop has run dry (``final``):

* every acknowledged event is journaled exactly once, at the seq it was acknowledged with; an
  event with an id that was not acknowledged is journaled at most once; a resent batch is
  answered with the first seqs;
* at most one receipt per intent, and at the end exactly one for every intent of a run that
  ended ``ok`` (parked ones are approved at the end);
* every ``Fetch`` journaled has exactly one run, which ends (``ok``, or ``error`` when its intent
  was denied, or cancelled); the counter cells equal a plain reference model: the sum of every
  ``Add`` journaled and of every ``Fetch`` whose run ended ``ok``;
* no file under the world directory holds the secret's bytes;
* replay from genesis (``world.history.verify_world``, what ``world replay --verify`` runs)
  matches, after every restart and at the end.

The fake file layer lives in ``tests/powerloss.py``; this tool puts ``tests/`` on ``sys.path``
to reuse it (a development tool, never shipped). Planted bugs for the simulation to find are in
``tests/tools/test_simulate.py``.

``upgrade`` runs a stage (propose, shadow, approve, apply) of an upgrade to an AIR whose policy
parks the other key's fetches (``a`` or ``b``), or of the newest proposal pending; a refusal
(``UpgradeRefused``, a stale proposal) is the layer's answer. A reducer change is not upgraded
to: the reference model is the v1 counter's.

Not simulated: partitioned worlds (``world.cluster``). The world is opened by ``world.open`` (a
local handle), so the served socket and HTTP front ends are not in the loop.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import hashlib
import json
import os
import random
import re
import shutil
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import httpx  # noqa: E402
from powerloss import PowerCut, PowerLoss  # type: ignore[import-not-found]  # noqa: E402

import world  # noqa: E402
from air import cbor  # noqa: E402
from air.errors import UsageError, WorldError  # noqa: E402
from world import Engine, World  # noqa: E402
from world import _fileio as fileio  # noqa: E402
from world._localconfig import read_local_config  # noqa: E402
from world.effects import HttpAdapter, Intent, Receipt  # noqa: E402
from world.effects._secrets import SecretResolver  # noqa: E402
from world.history import verify_world  # noqa: E402

COUNTER_AIR: Final = ROOT / "manifests" / "counter"
EVENT: Final = "demo/CounterEvent@1"
COUNTER: Final = "demo/Counter@1"
FETCH: Final = "sim/Fetch@1"
PLAN: Final = "sim/fetch@1"
SECRET: Final = b"sim-secret-5e1f0c7a9b-TOKEN"
KEYS: Final = ("a", "b", "c", "d")
ANSWERS: Final = ("ok", "ok", "500", "error", "timeout")
CYCLES_MAX: Final = 200
"""Loop cycles one ``run`` takes at most (each up to 1024 ticks): a world that is still busy
after that is a failure, not a hang."""
POWER_ACTIONS: Final = 6
"""Actions a ``power`` action's cut stays armed for; the power stays on if none reaches it."""
ANSWER_WAIT_S: Final = 30.0
"""Longest wait for the real adapter's worker to answer one intent (it answers at once; this
only turns a hang into a failure)."""


# --- the world ----------------------------------------------------------------------------------


def _plan_docs() -> list[dict[str, Any]]:
    secret_ref = {
        "variant": {
            "tag": "secret",
            "value": {"record": {"alias": {"text": "sim/token"}, "version": {"nat": 1}}},
        }
    }
    request = {
        "id": "fetch",
        "op": "emit_effect",
        "kind": "http.request.v2",
        "params": {
            "record": {
                "method": {"text": "GET"},
                "url": {
                    "op": "concat",
                    "args": [{"text": "http://sim.test/"}, {"ref": "@plan.input.key"}],
                },
                "headers": {"map": [{"key": "authorization", "value": secret_ref}]},
                "body": {"none": {}},
                "body_ref": {"none": {}},
            }
        },
        "cap": "http",
        "bind": {"effect_id_as": "req"},
    }
    add = {
        "id": "add",
        "op": "raise_event",
        "reducer": COUNTER,
        "key": {"ref": "@plan.input.key"},
        "event": {
            "record": {
                "$schema": EVENT,
                "key": {"ref": "@plan.input.key"},
                "op": {"variant": {"tag": "Add", "value": {"ref": "@plan.input.n"}}},
            }
        },
    }
    steps = [
        request,
        {"id": "wait", "op": "await_receipt", "for": {"ref": "@var:req"}, "bind": {"as": "r"}},
        add,
        {"id": "end", "op": "end"},
    ]
    edges = [{"from": a, "to": b} for a, b in (("fetch", "wait"), ("wait", "add"), ("add", "end"))]
    return [
        {"$kind": "defschema", "name": FETCH, "type": {"record": {"key": "text", "n": "nat"}}},
        {"$kind": "defplan", "name": PLAN, "input": FETCH, "steps": steps, "edges": edges},
        {
            "$kind": "defsecret",
            "name": "sim/token@1",
            "binding_id": "sim-token",
            "allowed_plans": [PLAN],
        },
        {
            "$kind": "defpolicy",
            "name": "sim/policy@1",
            "rules": [
                {"when": {"path_prefix": "/a"}, "decision": "require_approval"},
                {"when": {}, "decision": "allow"},
            ],
        },
    ]


def _air_docs(parks: str) -> dict[str, list[dict[str, Any]]]:
    """The AIR files of the world whose policy parks the fetches of key ``parks``."""
    module_doc, manifest_doc = json.loads((COUNTER_AIR / "counter.air.json").read_text())
    module_doc["wasm"] = str((COUNTER_AIR / module_doc["wasm"]).resolve())
    manifest_doc["triggers"] = [{"event": FETCH, "plan": PLAN}]
    grant = {
        "name": "http",
        "cap": "sys/http.out@1",
        "params": {"hosts": ["sim.test"], "verbs": ["GET"]},
    }
    manifest_doc["defaults"] = {"cap_grants": [grant], "policy": "sim/policy@1"}
    docs = _plan_docs()
    docs[-1]["rules"][0]["when"]["path_prefix"] = f"/{parks}"
    schemas = json.loads((COUNTER_AIR / "schemas.air.json").read_text())
    return {
        "counter.air.json": [module_doc, manifest_doc],
        "schemas.air.json": schemas,
        "sim.air.json": docs,
    }


@functools.cache
def air_folders() -> Path:
    """A folder holding ``air_a`` and ``air_b`` (the AIRs parking key a's or b's fetches).

    At the same path in every run and every process (a temporary folder named by the hash of
    its content, made once, by a rename): a world keeps its AIR files' paths in its sources, so
    a folder of another name would change the bytes an upgrade stores, and with them the
    durable operations a power cut is counted against."""
    files = {f"air_{parks}": _air_docs(parks) for parks in "ab"}
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"world-sim-air-{digest}"
    if folder.is_dir():
        return folder
    staging = Path(tempfile.mkdtemp(prefix="world-sim-air-", dir=folder.parent))
    for name, docs in files.items():
        (staging / name).mkdir()
        for file, doc in docs.items():
            (staging / name / file).write_text(json.dumps(doc, indent=1))
    try:
        staging.rename(folder)
    except OSError:  # another process made it first
        shutil.rmtree(staging)
    return folder


def make_world(root: Path) -> Path:
    """The simulated world under ``root`` (its AIR parks key a's fetches), with its secret
    bound to a file beside it; the world's directory."""
    secret_file = root / "secret.txt"
    fd = os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(SECRET + b"\n")
    path = root / "w"
    World.create(path, air_folders() / "air_a").close()
    local = {"secrets": {"sim-token": {"file": str(secret_file)}}}
    (path / "local.json").write_text(json.dumps(local))
    return path


# --- the adapter whose answers the seed schedules -------------------------------------------------


class SimAdapter:
    """Holds the HTTP intents it is handed; ``answer`` makes the product's ``HttpAdapter``
    answer one of them through a mock transport, and waits for its receipt."""

    adapter_id = "http"

    def __init__(self, w: World) -> None:
        self.held: list[tuple[Intent, Callable[[Receipt], None]]] = []
        self._how = "ok"
        secrets = SecretResolver(
            lambda: w.kernel.effects.air.secrets, read_local_config(w.path).secrets, w.path
        )
        self.inner = HttpAdapter(
            w.cas,
            retries_max=0,
            workers=1,
            secrets=secrets,
            transport=httpx.MockTransport(self._serve),
        )
        self.kinds = self.inner.kinds

    def _serve(self, request: httpx.Request) -> httpx.Response:
        auth = request.headers.get("authorization", "")
        if self._how == "500":
            return httpx.Response(500, text="server error")
        if self._how == "error":
            raise httpx.ConnectError(f"connection refused while sending authorization: {auth}")
        if self._how == "timeout":
            raise httpx.ReadTimeout(f"read timed out (authorization {auth})")
        return httpx.Response(200, headers={"x-echo": auth}, text=f"hello {auth}")

    def submit(self, intent: Intent, done: Callable[[Receipt], None]) -> None:
        self.held.append((intent, done))

    def answer(self, pick: int, how: str) -> str:
        intent, done = self.held.pop(pick % len(self.held))
        self._how = how
        got: list[Receipt] = []
        arrived = threading.Event()

        def keep(receipt: Receipt) -> None:
            got.append(receipt)
            arrived.set()

        self.inner.submit(intent, keep)
        if not arrived.wait(ANSWER_WAIT_S):
            raise Failure(f"the HTTP adapter did not answer intent {intent.intent_hash.hex()[:12]}")
        done(got[0])
        return intent.intent_hash.hex()[:12]

    def close(self) -> None:
        self.held.clear()
        self.inner.close()


# --- actions ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    """One step of a script; ``args`` are the numbers drawn for it (interpreted against the
    state the script is in, so a shrunk script still runs)."""

    kind: str
    args: tuple[Any, ...] = ()

    def __str__(self) -> str:
        return " ".join([self.kind, *map(str, self.args)])


def draw_script(seed: int, steps: int) -> list[Action]:
    rng = random.Random(seed)
    kinds = ["send"] * 6 + ["resend", "run", "run", "answer", "answer", "answer"]
    kinds += ["crash", "power", "disk", "checkpoint", "dead", "decide", "decide", "cancel"]
    kinds += ["upgrade", "upgrade"]
    script = []
    for _ in range(steps):
        kind = rng.choice(kinds)
        if kind == "send":
            events = []
            for _e in range(rng.randint(1, 4)):
                schema = "fetch" if rng.random() < 0.3 else "add"
                with_id = rng.random() < 0.6
                events.append((schema, rng.choice(KEYS), rng.randint(1, 9), with_id))
            script.append(Action("send", tuple(events)))
        elif kind == "answer":
            script.append(Action("answer", (rng.randrange(1 << 16), rng.choice(ANSWERS))))
        elif kind in ("resend", "dead", "cancel"):
            script.append(Action(kind, (rng.randrange(1 << 16),)))
        elif kind == "upgrade":
            stage = rng.choice(("propose", "shadow", "approve", "apply"))
            script.append(Action(kind, (stage, rng.randrange(1 << 16))))
        elif kind == "decide":
            verdict = "approve" if rng.random() < 0.7 else "deny"
            script.append(Action(kind, (rng.randrange(1 << 16), verdict)))
        elif kind == "power":
            script.append(Action("power", (rng.randint(0, 30),)))
        elif kind == "disk":
            script.append(Action("disk", (rng.choice(("EIO", "ENOSPC")), rng.randint(0, 30))))
        else:
            script.append(Action(kind))
    return script


# --- the simulation -----------------------------------------------------------------------------


class Failure(Exception):
    """An invariant broken; ``str`` says which, with no path and no time in it."""


@dataclass
class Sent:
    """A batch as sent: its events (schema, value, id) and, once acknowledged, its seqs."""

    events: list[tuple[str, Any, str | None]]
    seqs: list[int] | None = None


@dataclass
class DiskFault:
    """A ``world._fileio`` fault hook: ``OSError(code)`` once, at durable operation ``at``."""

    code: str
    at: int
    seen: int = 0
    fired: bool = False

    def __call__(self, op: str, path: str) -> None:
        if self.fired:
            return
        if self.seen == self.at:
            self.fired = True
            number = getattr(errno, self.code)
            raise OSError(number, os.strerror(number), path)
        self.seen += 1


@dataclass
class Sim:
    path: Path
    trace: Callable[[str], None]
    batches: list[Sent] = field(default_factory=list)
    next_id: int = 0
    handle: Any = None
    engine: Engine | None = None
    adapter: SimAdapter | None = None
    power: PowerLoss | None = None  # the fake file layer, while a power cut is armed
    power_left: int = 0  # actions it stays armed for
    _power_on: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    disk: DiskFault | None = None  # an I/O error armed
    disk_left: int = 0
    _disk_on: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    # --- the process ------------------------------------------------------------------------

    def start(self) -> None:
        self.handle = world.open(self.path)
        w = self.handle.world
        self.adapter = SimAdapter(w)
        self.engine = Engine(w, adapters=[self.adapter])
        self.engine.start()

    def die(self) -> None:
        """The process dies: no checkpoint, no close of anything that writes; the adapter's
        held intents are gone with it. Whatever was half started (a cut inside a reopen) too."""
        if self.engine is not None:
            self.engine.close()
        elif self.adapter is not None:
            self.adapter.close()
        if self.handle is not None:
            w = self.handle.world
            w._closed = True  # the handle's close must not checkpoint
            with contextlib.suppress(Exception):
                w.journal.close()
            w._lock.release()
        self.handle = self.engine = self.adapter = None

    def stop(self) -> None:
        if self.handle is not None:
            assert self.engine is not None
            self.engine.close()
            self.handle.close()
            self.handle = self.engine = None

    # --- running the loop -------------------------------------------------------------------

    def settle(self) -> None:
        """Cycles until nothing is ready and no receipt is waiting (held intents may remain)."""
        assert self.engine is not None
        for _ in range(CYCLES_MAX):
            before = self.handle.world.journal.seq_next
            self.engine.process_one_cycle()
            if self.engine.busy() is False and self.handle.world.journal.seq_next == before:
                return
        raise Failure(f"the loop was still busy after {CYCLES_MAX} cycles")

    # --- actions ----------------------------------------------------------------------------

    def act(self, action: Action) -> str:
        """Do ``action``; what happened, as one deterministic line."""
        do = getattr(self, f"do_{action.kind}")
        if self.disk is not None:
            return self._under_disk_fault(do, action)
        if self.power is None:
            return str(do(*action.args))
        loss, self.power_left = self.power, self.power_left - 1
        try:
            said = str(do(*action.args))
        except PowerCut:
            said = f"power cut at durable operation {loss.cut_at}"
        if loss.image is None and self.power_left > 0:
            return said
        self.power = None
        self._power_on.close()
        if loss.image is None:
            return said + "; no cut (the power stayed on)"
        self.die()
        shutil.rmtree(self.path)
        loss.image.rename(self.path)
        self.start()
        self.replay_matches()
        return said + "; reopened from what was durable"

    def _under_disk_fault(self, do: Callable[..., str], action: Action) -> str:
        fault, self.disk_left = self.disk, self.disk_left - 1
        assert fault is not None
        try:
            said = str(do(*action.args))
        except (WorldError, OSError) as exc:  # a failing disk is a refusal, never a loss
            said = f"refused: {type(exc).__name__}"
        if not fault.fired and self.disk_left > 0:
            return said
        self.disk = None
        self._disk_on.close()
        if not fault.fired:
            return said + "; no fault (the disk held)"
        self.die()  # the operator restarts the process on a failing disk's error
        self.start()
        self.replay_matches()
        return said + f"; {fault.code} at durable operation {fault.at}; restarted"

    def do_disk(self, code: str, at: int) -> str:
        if self.disk is not None or self.power is not None:
            return "a fault is armed already"
        self.disk, self.disk_left = DiskFault(code, at), POWER_ACTIONS
        self._disk_on = contextlib.ExitStack()
        self._disk_on.enter_context(fileio.fault_hook(self.disk))
        return f"armed {code} at durable operation {at} of the next {POWER_ACTIONS} actions"

    def do_send(self, *events: tuple[str, str, int, bool]) -> str:
        batch = Sent([])
        for schema, key, n, with_id in events:
            event_id = None
            if with_id:
                event_id, self.next_id = f"e{self.next_id}", self.next_id + 1
            if schema == "fetch":
                batch.events.append((FETCH, {"key": key, "n": n}, event_id))
            else:
                batch.events.append(
                    (EVENT, {"key": key, "op": {"$tag": "Add", "$value": n}}, event_id)
                )
        self.batches.append(batch)
        return self._send(batch, first=True)

    def _send(self, batch: Sent, *, first: bool) -> str:
        # one request per schema (a handle's send carries one schema), Adds first
        by_event = [0] * len(batch.events)
        for schema in (EVENT, FETCH):
            part = [k for k, (s, _v, _i) in enumerate(batch.events) if s == schema]
            if part:
                values = [batch.events[k][1] for k in part]
                ids = [batch.events[k][2] for k in part]
                sent = self.handle.send_many(schema, values, ids=ids)
                for k, seq in zip(part, sent.seqs, strict=True):
                    by_event[k] = seq
        if not first and batch.seqs is not None:
            for (_s, _v, event_id), old, new in zip(
                batch.events, batch.seqs, by_event, strict=True
            ):
                if event_id is not None and old != new:
                    raise Failure(
                        f"resent id {event_id} answered seq {new}, first acknowledged at {old}"
                    )
        if batch.seqs is None or first:
            batch.seqs = by_event
        return f"acknowledged seqs {by_event}"

    def do_resend(self, pick: int) -> str:
        if not self.batches:
            return "nothing to resend"
        index = pick % len(self.batches)
        batch = self.batches[index]
        if batch.seqs is None:
            batch.seqs = None
            return self._send(batch, first=True) + f" (batch {index}, never acknowledged)"
        return self._send(batch, first=False) + f" (batch {index} again)"

    def do_run(self) -> str:
        self.settle()
        held = len(self.adapter.held) if self.adapter else 0
        return f"ran; {held} intent(s) held"

    def do_answer(self, pick: int, how: str) -> str:
        assert self.adapter is not None
        if not self.adapter.held:
            return "no intent held"
        intent = self.adapter.answer(pick, how)
        self.settle()
        return f"answered {intent} {how}"

    def do_crash(self) -> str:
        self.die()
        self.start()
        self.replay_matches()
        return "crashed and reopened"

    def do_power(self, cut_at: int) -> str:
        if self.power is not None or self.disk is not None:
            return "a power cut is armed already"
        self.power, self.power_left = PowerLoss(self.path, cut_at=cut_at, seed=None), POWER_ACTIONS
        self._power_on = contextlib.ExitStack()
        self._power_on.enter_context(self.power.installed())
        return (
            f"armed a power cut at durable operation {cut_at} of the next {POWER_ACTIONS} actions"
        )

    def do_checkpoint(self) -> str:
        self.handle.snapshot()
        return "checkpointed"

    def do_dead(self, pick: int) -> str:
        letters = self.handle.dead_letters().letters
        if not letters:
            return "no dead letter"
        letter_id = str(letters[pick % len(letters)]["id"])
        verb, act = ("retried", self.handle.retry_dead_letter)
        if pick % 2 == 0:
            verb, act = ("dropped", self.handle.drop_dead_letter)
        try:
            act(letter_id)
        except UsageError as refused:  # the operations layer's answer, not a broken invariant
            return f"dead letter {letter_id} not {verb}: {type(refused).__name__}"
        return f"{verb} dead letter {letter_id}"

    def _parked(self) -> list[str]:
        intents = self.handle.effects().intents
        return sorted(
            i["intent_hash"].removeprefix("blake3:") for i in intents if i["status"] == "parked"
        )

    def do_decide(self, pick: int, verdict: str) -> str:
        parked = self._parked()
        if not parked:
            return "no intent parked"
        chosen = parked[pick % len(parked)]
        self.handle.decide(chosen, verdict == "approve")
        self.settle()
        return f"{'approved' if verdict == 'approve' else 'denied'} {chosen[:12]}"

    def do_cancel(self, pick: int) -> str:
        live = sorted(
            r["run_id"] for r in self.handle.runs() if r["status"] in ("running", "waiting")
        )
        if not live:
            return "no run to cancel"
        run_id = live[pick % len(live)]
        try:
            self.handle.cancel_run(run_id)
        except UsageError as refused:
            return f"run {run_id} not cancelled: {type(refused).__name__}"
        self.settle()
        return f"cancelled run {run_id}"

    def do_upgrade(self, stage: str, pick: int) -> str:
        """A stage of an upgrade to the AIR that parks the other key's fetches (``a`` or
        ``b``, by ``pick``), or of the newest proposal not yet applied."""
        h = self.handle
        try:
            if stage == "propose":
                parks = "ab"[pick % 2]
                shown = h.propose(air_folders() / f"air_{parks}")
                return f"proposed {shown.id} (parks {parks})"
            pending = [p["id"] for p in h.proposals().proposals if p.get("applied") is None]
            if not pending:
                return "no proposal pending"
            chosen = max(pending)
            if stage == "shadow":
                h.shadow(chosen)
            elif stage == "approve":
                h.approve(chosen)
            else:
                h.apply(chosen)
                self.settle()
        except WorldError as refused:  # the operations layer's answer (stale, not approved)
            return f"{stage} refused: {type(refused).__name__}"
        return f"{stage} {chosen}"

    # --- invariants -------------------------------------------------------------------------

    def records(self) -> list[Any]:
        return list(self.handle.world.journal.read(0))

    def check(self) -> None:
        recs = self.records()
        self._acknowledged_once(recs)
        self._one_receipt_each(recs, final=False)
        self._no_secret_on_disk()

    def final(self) -> None:
        if self.power is not None:  # the script ended before the cut: the power stays on
            self.power = None
            self._power_on.close()
        if self.disk is not None:
            self.disk = None
            self._disk_on.close()
        assert self.adapter is not None
        self.settle()
        for turn in range(1000):
            parked = self._parked()
            if parked:
                self.handle.decide(parked[0], True)
            elif self.adapter.held:
                self.adapter.answer(0, ANSWERS[turn % len(ANSWERS)])
            else:
                break
            self.settle()
        recs = self.records()
        self._acknowledged_once(recs)
        self._one_receipt_each(recs, final=True)
        self._cells_match(recs)
        self._no_secret_on_disk()
        self.replay_matches()

    def _acknowledged_once(self, recs: list[Any]) -> None:
        by_seq = {r.seq: r for r in recs}
        ids = Counter(r.body["id"] for r in recs if r.kind == "event.in" and "id" in r.body)
        for event_id, count in ids.items():
            if count > 1:
                raise Failure(f"event id {event_id} journaled {count} times")
        for batch in self.batches:
            if batch.seqs is None:
                continue
            for (schema, value, event_id), seq in zip(batch.events, batch.seqs, strict=True):
                rec = by_seq.get(seq)
                if rec is None or rec.kind != "event.in":
                    raise Failure(
                        f"acknowledged seq {seq} ({schema} {value}) is not in the journal"
                    )
                got = (rec.body["schema"], cbor.loads(rec.body["value"]), rec.body.get("id"))
                if got != (schema, value, event_id):
                    raise Failure(
                        f"acknowledged seq {seq} holds {got}, not {(schema, value, event_id)}"
                    )

    def _one_receipt_each(self, recs: list[Any], *, final: bool) -> None:
        receipts = Counter(r.body["intent_hash"] for r in recs if r.kind == "receipt")
        for intent_hash, count in receipts.items():
            if count > 1:
                raise Failure(f"intent {intent_hash.hex()[:12]} has {count} receipts")
        if not final:
            return
        ended = {r.body["run_id"]: r.body["status"] for r in recs if r.kind == "plan.ended"}
        for rec in recs:
            ok = rec.kind == "effect.queued" and ended.get(rec.body["origin"]["run_id"]) == "ok"
            if ok and receipts[rec.body["intent_hash"]] != 1:
                raise Failure(f"intent {rec.body['intent_hash'].hex()[:12]} ended with no receipt")

    def _runs_once(self, recs: list[Any]) -> dict[int, str]:
        """Every ``Fetch`` has exactly one run, and every run ended; each ``Fetch``'s seq with
        its run's status. Runs are numbered from 0 in the order their triggers are journaled,
        and a run cancelled before its first tick ends with no ``plan.started``."""
        fetches = [r.seq for r in recs if r.kind == "event.in" and r.body["schema"] == FETCH]
        started = Counter(r.body["src"] for r in recs if r.kind == "plan.started")
        src_of = {r.body["run_id"]: r.body["src"] for r in recs if r.kind == "plan.started"}
        ended: dict[int, str] = {}
        for rec in recs:
            if rec.kind in ("plan.ended", "run.cancelled"):
                run_id = rec.body["run_id"]
                if run_id >= len(fetches) or src_of.get(run_id, fetches[run_id]) != fetches[run_id]:
                    raise Failure(f"run {run_id} is not the run of a Fetch")
                if fetches[run_id] in ended:
                    raise Failure(f"run {run_id} ended twice")
                ended[fetches[run_id]] = rec.body.get("status", "cancelled")
        for seq in fetches:
            if started[seq] > 1:
                raise Failure(f"the Fetch at seq {seq} started {started[seq]} runs")
            if seq not in ended:
                raise Failure(f"the run of the Fetch at seq {seq} never ended")
        return ended

    def _cells_match(self, recs: list[Any]) -> None:
        """The counter cells are the sum of every ``Add`` journaled and of every ``Fetch``
        whose run ended ``ok`` (a denied or cancelled one adds nothing)."""
        ended = self._runs_once(recs)
        model: dict[str, list[int]] = {}
        for rec in recs:
            if rec.kind != "event.in":
                continue
            value = cbor.loads(rec.body["value"])
            if rec.body["schema"] == EVENT:
                n = value["op"]["$value"]
            elif ended[rec.seq] == "ok":
                n = value["n"]
            else:
                continue
            cell = model.setdefault(value["key"], [0, 0])
            cell[0] += n
            cell[1] += 1
        w = self.handle.world
        got = {c.key: w.state(COUNTER, c.key) for c in w.cells(COUNTER)}
        want = {k: {"count": c, "events": e} for k, (c, e) in model.items()}
        if got != want:
            raise Failure(
                f"cells {sorted(got.items())} differ from the model {sorted(want.items())}"
            )

    def _no_secret_on_disk(self) -> None:
        for file in sorted(self.path.rglob("*")):
            if file.is_file() and not file.is_symlink() and SECRET in file.read_bytes():
                raise Failure(f"the secret is in {file.relative_to(self.path)}")

    def replay_matches(self) -> None:
        self.handle.world.commit()
        report = verify_world(self.path)
        if report.divergence is not None or report.mismatches or report.bad_receipt is not None:
            what = report.divergence or report.bad_receipt or report.mismatches[:3]
            raise Failure(f"replay differs: {what}")


# --- running, shrinking, printing ---------------------------------------------------------------


@dataclass
class Outcome:
    failure: str | None
    lines: list[str]
    failed_at: int | None = None  # index of the action after which a check failed

    @property
    def kind(self) -> str | None:
        """The failure without its numbers, hashes and values: what a shrunk script must
        still break (an exception's class; an invariant's words)."""
        if self.failure is None:
            return None
        head, colon, _rest = self.failure.partition(":")
        if colon and head.isidentifier():
            return head
        return re.sub(r"[0-9a-f]{6,}|\d+|\(.*?\)|\[.*?\]|\{.*?\}", "", self.failure)


def run_script(script: Sequence[Action], *, verbose: bool = False) -> Outcome:
    """Run ``script`` on a fresh world in a fresh folder; what happened."""
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="world-sim-") as tmp:
        sim = Sim(make_world(Path(tmp)), lines.append)
        index: int | None = None
        try:
            sim.start()
            for index, action in enumerate(script):
                said = sim.act(action)
                lines.append(f"{index:4d}. {action}  ->  {said}")
                sim.check()
            index = len(script)
            sim.final()
            return Outcome(None, lines)
        except Failure as broken:
            return Outcome(_relative(str(broken), tmp), _raised(lines, script, index), index)
        except Exception as exc:  # the product raised where it should not: a failure too
            said = f"{type(exc).__name__}: {_relative(str(exc), tmp)}"
            return Outcome(said, _raised(lines, script, index), index)
        finally:
            with contextlib.suppress(Exception):
                sim.stop()


def _raised(lines: list[str], script: Sequence[Action], index: int | None) -> list[str]:
    """``lines`` with the action that raised, if one did (its line was never written)."""
    if index is not None and index < len(script) and len(lines) == index:
        lines.append(f"{index:4d}. {script[index]}  ->  raised")
    return lines


def _relative(text: str, tmp: str) -> str:
    return text.replace(os.path.realpath(tmp), "<tmp>").replace(tmp, "<tmp>")


def shrink(script: list[Action], runs_max: int) -> tuple[list[Action], Outcome]:
    """The shortest script found that fails the same way (``Outcome.kind``), by dropping
    chunks, then single actions, re-running each candidate from scratch; at most ``runs_max``
    runs. A candidate failing another way is not taken: a dropped fsync shrunk to "the
    checkpoint is ahead of the journal" would hide the acknowledged event it lost."""
    outcome = run_script(script)
    assert outcome.failure is not None
    if outcome.failed_at is not None:
        script = script[: outcome.failed_at + 1]
    runs = 1
    chunk = max(1, len(script) // 2)
    while chunk >= 1 and runs < runs_max:
        start = 0
        while start < len(script) and runs < runs_max:
            candidate = script[:start] + script[start + chunk :]
            tried = run_script(candidate)
            runs += 1
            if tried.failure is not None and tried.kind == outcome.kind:
                script, outcome = candidate, tried
            else:
                start += chunk
        chunk //= 2
    return script, outcome


def simulate(
    seed: int, steps: int, *, trace: bool, shrink_runs: int, out: Callable[[str], None]
) -> bool:
    script = draw_script(seed, steps)
    outcome = run_script(script)
    if trace:
        for line in outcome.lines:
            out(line)
    if outcome.failure is None:
        out(f"seed {seed}: ok ({len(script)} actions)")
        return True
    out(f"seed {seed}: FAILED after action {outcome.failed_at}: {outcome.failure}")
    shortest, shrunk = shrink(script, shrink_runs)
    out(f"seed {seed}: shortest failing trace ({len(shortest)} of {len(script)} actions):")
    for line in shrunk.lines:
        out("  " + line)
    out(f"  -> {shrunk.failure}")
    out(f"reproduce: python tools/simulate.py --seed {seed} --steps {steps}")
    return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--seeds", type=int, default=None, help="run seeds 0..N-1")
    which.add_argument("--seed", type=int, default=None, help="run this one seed")
    parser.add_argument("--first", type=int, default=0, help="with --seeds: the first seed")
    parser.add_argument("--steps", type=int, default=40, help="actions per seed (default 40)")
    parser.add_argument("--trace", "--verbose", action="store_true", help="print every action")
    parser.add_argument(
        "--shrink-runs", type=int, default=60, help="most re-runs to shrink a failure (default 60)"
    )
    args = parser.parse_args(argv)
    if args.seed is not None:
        seeds: Iterator[int] | range = iter([args.seed])
    else:
        seeds = range(args.first, args.first + (args.seeds if args.seeds is not None else 10))
    ok = True
    for seed in seeds:
        ok = (
            simulate(seed, args.steps, trace=args.trace, shrink_runs=args.shrink_runs, out=print)
            and ok
        )
        if not ok:
            break
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
