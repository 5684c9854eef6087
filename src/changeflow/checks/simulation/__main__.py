"""``python -m changeflow.checks.simulation`` (``make simulate``, ``make simulate-long``).

- ``--seed N`` replays seed N exactly (its plan, faults and schedule); ``--ops 3,7`` only those operations
  of it; ``--plan FILE`` a plan a shrink wrote; ``--shrink`` shrinks each kind of violation found to a small
  reproduction and prints the command that replays it.
- ``--seeds A-B`` runs a campaign (``--json``: one object per seed and the seams found, by seed).
- ``--long`` runs seeds from ``--from`` on until ``--hours`` have passed, printing every failing seed
  shrunk, as a replay command, as it goes.
Exit status: 0 when no violation was found, 1 when one was.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .findings import PROMISES
from .runner import Outcome, run

OUT = Path("build/simulate")


def _seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def _print(outcome: Outcome, verbose: bool) -> None:
    seams = sorted({v.seam for v in outcome.violations if v.seam})
    print(f"seed {outcome.seed}: {outcome.ops} operations, {len(outcome.trace)} scheduled steps (schedule "
          f"{outcome.fingerprint}), {outcome.seconds:.1f} s: " + (f"{len(outcome.violations)} violations, seams "
          f"{seams or '-'}" if outcome.violations else "no violation"))
    for violation in outcome.violations:
        print(f"  {violation.line()[:600]}")
    if verbose:
        for line in outcome.log:
            print(f"  · {line[:300]}")


def _shrink_all(outcome: Outcome, out: Path) -> list[dict]:
    from .plan import plan as make_plan
    from .shrink import kind_of, replay_commands, shrink, write

    found = []
    for target in sorted({kind_of(v) for v in outcome.violations}):
        smallest = shrink(outcome.seed, target)
        path = write(smallest, target, out)
        commands = replay_commands(smallest, make_plan(outcome.seed), path)
        print(f"  {target}: shrunk to {len(smallest['ops'])} operation(s) in {smallest['runs']} runs: "
              + " or ".join(commands))
        found.append({"target": target, "operations": len(smallest["ops"]), "plan": str(path), "replay": commands})
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m changeflow.checks.simulation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="replay one seed")
    parser.add_argument("--seeds", help="a campaign over seeds A-B")
    parser.add_argument("--ops", help="only these operations of the seed (indices, comma-separated)")
    parser.add_argument("--plan", type=Path, help="replay a plan file (a shrink's)")
    parser.add_argument("--shrink", action="store_true", help="shrink each kind of violation found")
    parser.add_argument("--long", action="store_true", help="run seeds until --hours have passed, shrinking failures")
    parser.add_argument("--from", dest="start", type=int, default=None, help="--long: the first seed (default: "
                        "the time)")
    parser.add_argument("--hours", type=float, default=4.0, help="--long: how long (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print one JSON document (a campaign: per seed)")
    parser.add_argument("--verbose", action="store_true", help="also print what each operation did")
    parser.add_argument("--out", type=Path, default=OUT, help="where shrunk plans go (default %(default)s)")
    args = parser.parse_args(argv)
    if args.plan:
        planned = json.loads(args.plan.read_text(encoding="utf-8"))
        outcomes = [run(planned["seed"], plan=planned)]
    elif args.long:
        return _long(args)
    else:
        seeds = _seeds(args.seeds) if args.seeds else [args.seed if args.seed is not None else 0]
        kept = [int(i) for i in args.ops.split(",")] if args.ops else None
        outcomes = []
        for seed in seeds:
            outcomes.append(run(seed, kept))
            if not args.json:
                _print(outcomes[-1], args.verbose)
    shrunk = {}
    if args.shrink:
        for outcome in outcomes:
            if outcome.violations:
                shrunk[outcome.seed] = _shrink_all(outcome, args.out)
    if args.json:
        found: dict[int, list[int]] = {}
        for outcome in outcomes:
            for seam in {v.seam for v in outcome.violations if v.seam}:
                found.setdefault(seam, []).append(outcome.seed)
        json.dump({"promises": PROMISES, "seams": {str(k): sorted(v) for k, v in sorted(found.items())},
                   "seeds": [o.to_json() for o in outcomes], "shrunk": shrunk}, sys.stdout, indent=1)
        print()
    elif args.plan:
        _print(outcomes[0], args.verbose)
    return 1 if any(o.violations for o in outcomes) else 0


def _long(args) -> int:
    """Seeds one after another until the time is up; each failing one shrunk and printed at once (and
    appended to OUT/long.jsonl), so a run cut short keeps what it found."""
    seed = args.start if args.start is not None else int(time.time()) % 1_000_000
    deadline = time.monotonic() + args.hours * 3600
    args.out.mkdir(parents=True, exist_ok=True)
    failing = 0
    with (args.out / "long.jsonl").open("a", encoding="utf-8") as log:
        while time.monotonic() < deadline:
            outcome = run(seed)
            _print(outcome, False)
            if outcome.violations:
                failing += 1
                shrunk = _shrink_all(outcome, args.out)
                log.write(json.dumps({**outcome.to_json(), "shrunk": shrunk}) + "\n")
                log.flush()
            seed += 1
    print(f"simulate --long: seeds up to {seed - 1}, {failing} failing")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
