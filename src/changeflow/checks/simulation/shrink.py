"""Shrinking a failing seed to a small reproduction: delta debugging (Zeller's ddmin) over its operation
list, then over the requests of each batch of changes and the records of each import that is left. A
candidate reproduces when a fresh world running it finds a violation of the same kind (the same seam, or
for one the issue did not list, the same code). The result is a plan (``plan.json``) that replays it, and
when only whole operations were dropped, ``make simulate SEED=N OPS=...`` replays it too."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable, Sequence

from .findings import Violation
from .plan import plan as make_plan
from .runner import run


def kind_of(violation: Violation) -> str:
    return f"seam {violation.seam}" if violation.seam else violation.code


def ddmin(items: Sequence[Any], fails: Callable[[list[Any]], bool]) -> list[Any]:
    """A 1-minimal sublist of ``items`` (in order) for which ``fails`` still holds (``fails(items)`` does)."""
    items, n = list(items), 2
    while len(items) >= 2:
        size = -(-len(items) // n)
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        for chunk in chunks:
            if fails(chunk):
                items, n = chunk, 2
                break
        else:
            for chunk in chunks:
                rest = [x for x in items if x not in chunk]
                if len(chunks) > 2 and fails(rest):
                    items, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(items):
                    break
                n = min(len(items), 2 * n)
    return items


def shrink(seed: int, target: str, budget: int = 200) -> dict[str, Any]:
    """The smallest plan found (within ``budget`` runs) that still fails with ``target`` (``kind_of``)."""
    planned = make_plan(seed)
    tried: dict[str, bool] = {}
    runs = [0]

    def fails(candidate: dict[str, Any]) -> bool:
        key = json.dumps(candidate, sort_keys=True)
        if key not in tried:
            if runs[0] >= budget:
                return False
            runs[0] += 1
            outcome = run(seed, plan=candidate)
            tried[key] = any(kind_of(v) == target for v in outcome.violations)
        return tried[key]

    def with_ops(indices: list[int]) -> dict[str, Any]:
        return {**planned, "ops": [planned["ops"][i] for i in indices], "kept": indices}

    kept = ddmin(range(len(planned["ops"])), lambda indices: fails(with_ops(indices)))
    smallest = with_ops(kept)
    for position, op in enumerate(smallest["ops"]):
        for field in ("requests", "records"):
            if len(op.get(field) or []) < 2:
                continue

            def fewer(items: list[Any], position=position, field=field) -> bool:
                candidate = copy.deepcopy(smallest)
                candidate["ops"][position][field] = items
                return fails(candidate)

            reduced = ddmin(op[field], fewer)
            smallest = copy.deepcopy(smallest)
            smallest["ops"][position][field] = reduced
    smallest["runs"] = runs[0]
    return smallest


def write(smallest: dict[str, Any], target: str, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"seed{smallest['seed']}-{target.replace(' ', '').replace('.', '-')}.json"
    path.write_text(json.dumps(smallest, indent=1) + "\n", encoding="utf-8")
    return path


def replay_commands(smallest: dict[str, Any], original: dict[str, Any], path: Path) -> list[str]:
    commands = [f"make simulate PLAN={path}"]
    whole = all(smallest["ops"][i] == original["ops"][k] for i, k in enumerate(smallest["kept"]))
    if whole:
        commands.insert(0, f"make simulate SEED={smallest['seed']} OPS={','.join(map(str, smallest['kept']))}")
    return commands
