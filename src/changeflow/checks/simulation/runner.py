"""Running a plan: one seed, or some of its operations, on a fresh world."""

from __future__ import annotations

import hashlib
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .findings import Violation, seams_of
from .plan import plan as make_plan
from .world import World


def _operations() -> dict[str, Callable]:
    from . import chainops, check_audit, check_redaction, identity, importing, writes

    return {"changes": writes.run_changes, "redrive": writes.run_redrive, "legacy": chainops.run_legacy,
            "adopt": chainops.run_adopt, "redact": chainops.run_redact, "digest": chainops.run_digest,
            "export": chainops.run_export, "ttl": chainops.run_ttl, "proof": chainops.run_proof,
            "reads": check_redaction.run_reads,
            "insider": check_audit.run_insider, "import": importing.run_import, "identity": identity.run_identity}


@dataclass
class Outcome:
    seed: int
    kept: list[int] | None
    violations: list[Violation] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    seconds: float = 0.0
    ops: int = 0
    timings: list[tuple[int, str, float]] = field(default_factory=list)  # (index, kind, seconds)

    @property
    def fingerprint(self) -> str:
        """The schedule's digest: equal for two runs of a seed that interleaved the same way."""
        return hashlib.sha256("\n".join(self.trace).encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "ops": self.kept, "seconds": round(self.seconds, 2), "operations": self.ops,
                "schedule": self.fingerprint, "steps": len(self.trace), "seams": seams_of(self.violations),
                "violations": [v.to_json() for v in self.violations]}


def run(seed: int, kept: list[int] | None = None, plan: dict[str, Any] | None = None,
        workdir: Path | None = None) -> Outcome:
    """Run the seed's plan (only the operations ``kept``, by index, if given), or ``plan`` as given (a shrunk
    one: its ``kept`` says which of the seed's operations it holds), on a fresh world."""
    began = time.monotonic()
    planned = plan or make_plan(seed)
    indices = planned.get("kept") or list(range(len(planned["ops"])))
    if kept is not None:
        indices = [i for i in indices if i in kept]
    by_index = dict(zip(planned.get("kept") or range(len(planned["ops"])), planned["ops"]))
    operations = _operations()
    outcome = Outcome(seed, kept if plan is None else planned.get("kept"))
    with tempfile.TemporaryDirectory(prefix=f"simulate-{seed}-") as scratch:
        with World(seed, planned["config"], Path(workdir or scratch)) as world:
            for index in indices:
                op = by_index[index]
                world.op = index
                outcome.ops += 1
                started = time.monotonic()
                try:
                    operations[op["kind"]](world, op)
                except Exception as exc:  # noqa: BLE001 - the simulation's own failure is reported, not raised
                    import traceback

                    world.violation("simulation", "simulation.error",
                                    f"{op['kind']} raised {''.join(traceback.format_exception(exc))[-1500:]}")
                outcome.timings.append((index, op["kind"], round(time.monotonic() - started, 2)))
            for problem in world.scheduler.problems:
                world.violation("simulation", "simulation.error", problem)
            seen: set[tuple] = set()  # a violation seen again by a later check is reported once
            for violation in world.violations:
                key = (violation.code, violation.entity, violation.text)
                if key not in seen:
                    seen.add(key)
                    outcome.violations.append(violation)
            outcome.trace, outcome.log = world.scheduler.trace, world.log
    outcome.seconds = time.monotonic() - began
    return outcome
