"""A seeded whole-world simulation: one seed drives a world through sends, runs, adapter answers,
operator acts, crashes and power cuts, and the invariants are checked after every action.

Usage:

    python tools/simulate.py --seeds 20            # seeds 0..19
    python tools/simulate.py --seed 7 --trace      # one seed, every action printed
    python tools/simulate.py --seed 7 --steps 200  # a longer script
    python tools/simulate.py --seeds 20 --cluster  # a partitioned world (simulation._cluster)

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

The parts live in ``tools/simulation/`` (its ``__init__`` names them). The fake file layer lives
in ``tests/powerloss.py``; the package puts ``tests/`` on ``sys.path`` to reuse it (a
development tool, never shipped). Planted bugs for the simulation to find are in
``tests/tools/test_simulate.py``.

``upgrade`` runs a stage (propose, shadow, approve, apply) of an upgrade to an AIR whose policy
parks the other key's fetches (``a`` or ``b``), or of the newest proposal pending; a refusal
(``UpgradeRefused``, a stale proposal) is the layer's answer. A reducer change is not upgraded
to: the reference model is the v1 counter's.

``--cluster`` drives a partitioned world instead (``LocalCluster``: sends, resends, runs, a kill
of one partition, crashes and power cuts over the cluster; ``simulation._cluster`` says what it
checks). Not simulated: the served socket and HTTP front ends (the world is opened by
``world.open``, a local handle); effects and operator acts on a partitioned world.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence

from simulation import Action, check_seed, draw_script, run_script, shrink, simulate

__all__ = ["Action", "check_seed", "draw_script", "main", "run_script", "shrink", "simulate"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--seeds", type=int, default=None, help="run N seeds, from --first (default: 10 seeds)"
    )
    which.add_argument("--seed", type=int, default=None, help="run this one seed")
    parser.add_argument("--first", type=int, default=0, help="with --seeds: the first seed")
    parser.add_argument("--steps", type=int, default=40, help="actions per seed (default 40)")
    parser.add_argument(
        "--cluster", action="store_true", help="a partitioned world (3 partitions) instead"
    )
    parser.add_argument("--trace", "--verbose", action="store_true", help="print every action")
    parser.add_argument(
        "--shrink-runs", type=int, default=60, help="most re-runs to shrink a failure (default 60)"
    )
    args = parser.parse_args(argv)
    if args.seed is not None:
        seeds: Iterable[int] = [args.seed]
    else:
        seeds = range(args.first, args.first + (args.seeds if args.seeds is not None else 10))
    ok = True
    for seed in seeds:
        ok = (
            simulate(
                seed,
                args.steps,
                trace=args.trace,
                shrink_runs=args.shrink_runs,
                out=print,
                cluster=args.cluster,
            )
            and ok
        )
        if not ok:
            break
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
