"""The simulated world: its AIR (the counter, the ``sim/fetch@1`` plan with a secret header,
a policy parking one key's fetches), the world made from it, and ``SimAdapter``, the HTTP
adapter whose answers the script schedules. ``Failure``: an invariant broken."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Protocol

import httpx

from world import World
from world._localconfig import read_local_config
from world.effects import HttpAdapter, Intent, Receipt
from world.effects._secrets import SecretResolver

ROOT: Final = Path(__file__).resolve().parents[2]
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


class Failure(Exception):
    """An invariant broken; ``str`` says which, with no path and no time in it."""


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


def _fan_docs() -> dict[str, list[dict[str, Any]]]:
    """The partitioned variant's AIR: the counter and ``sim/fan@1`` (``_cluster``)."""
    module_doc, manifest_doc = json.loads((COUNTER_AIR / "counter.air.json").read_text())
    module_doc["wasm"] = str((COUNTER_AIR / module_doc["wasm"]).resolve())
    manifest_doc["triggers"] = [{"event": "sim/Fan@1", "plan": "sim/fan@1"}]
    steps = [
        {
            "id": f"to_{slot}",
            "op": "raise_event",
            "reducer": COUNTER,
            "key": {"ref": f"@plan.input.{slot}"},
            "event": {
                "record": {
                    "key": {"ref": f"@plan.input.{slot}"},
                    "op": {"variant": {"tag": "Add", "value": {"nat": 1}}},
                }
            },
        }
        for slot in ("a", "b", "c")
    ]
    plan = {
        "$kind": "defplan",
        "name": "sim/fan@1",
        "input": "sim/Fan@1",
        "steps": steps,
        "edges": [{"from": "to_a", "to": "to_b"}, {"from": "to_b", "to": "to_c"}],
    }
    fan = {"record": {"a": "text", "b": "text", "c": "text"}}
    return {
        "counter.air.json": [module_doc, manifest_doc],
        "schemas.air.json": json.loads((COUNTER_AIR / "schemas.air.json").read_text()),
        "fan.air.json": [{"$kind": "defschema", "name": "sim/Fan@1", "type": fan}, plan],
    }


@functools.cache
def air_folders() -> Path:
    """A folder holding ``air_a`` and ``air_b`` (the AIRs parking key a's or b's fetches) and
    ``air_fan`` (the partitioned variant's).

    At the same path in every run and every process (a temporary folder named by the hash of
    its content, made once, by a rename): a world keeps its AIR files' paths in its sources, so
    a folder of another name would change the bytes an upgrade stores, and with them the
    durable operations a power cut is counted against."""
    files = {f"air_{parks}": _air_docs(parks) for parks in "ab"}
    files["air_fan"] = _fan_docs()
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


class _Powered(Protocol):
    """A simulation that a power cut can be armed on (``Sim``, ``ClusterSim``)."""

    path: Path
    power: Any  # powerloss.PowerLoss while armed
    power_left: int
    _power_on: contextlib.ExitStack

    def die(self) -> None: ...

    def start(self) -> None: ...


def under_power(
    sim: _Powered, do: Callable[..., Any], args: tuple[Any, ...], reopened: Callable[[], str]
) -> str:
    """``do(*args)`` with the power cut armed, as one line: when the cut came (or the armed
    actions are spent without one), the power goes back on; after a cut the world is put back
    from what was durable and started again, and ``reopened()`` checks it and says how."""
    from powerloss import PowerCut  # type: ignore[import-not-found]

    loss, sim.power_left = sim.power, sim.power_left - 1
    try:
        said = str(do(*args))
    except PowerCut:
        said = f"power cut at durable operation {loss.cut_at}"
    if loss.image is None and sim.power_left > 0:
        return said
    sim.power = None
    sim._power_on.close()
    if loss.image is None:
        return said + "; no cut (the power stayed on)"
    sim.die()
    shutil.rmtree(sim.path)
    loss.image.rename(sim.path)
    sim.start()
    return f"{said}; {reopened()}"
