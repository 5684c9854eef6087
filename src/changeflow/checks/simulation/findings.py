"""What the checkers find: a ``Violation`` names the promise it breaks (one checker per promise), what was
seen, the operation it was seen in, and a ``code`` that says which kind of break it is. ``SEAMS`` maps each
code to the issue-32 seam it is (1-15) when it is one, so that a run's report says "seam 8 found by seed 41"
and the lead can compare a run before the fixes with one after them.

The mapping is by symptom, read from the issue's own wording: a confident outcome the history contradicts
after a lost write with writers in its back-off is seam 1, whatever made it; a code with no seam is a
violation the issue did not list (reported all the same, as "other")."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

PROMISES = {
    "outcomes": "every outcome told is true; one the workflow cannot know is told as unknown",
    "versions": "no version lost, doubled or reverted",
    "audit": "verify, verify --since-digest, verify-proof and verify-export refuse every insider edit, naming it",
    "redaction": "redacted content is gone everywhere it was served",
    "import": "an import applies each record exactly once, the last one last; odd input refused by name",
    "principals": "no principal recorded that AWS would not have authenticated (or the policy not admitted)",
}

# code -> the seam of issue 32 (its numbering), or None for a violation the issue did not list
SEAMS: dict[str, int | None] = {
    # outcomes and versions under K writers and faults
    "outcome.stale-but-wrote": 1,
    "outcome.duplicate-but-wrote": 1,
    "versions.doubled": 1,
    "outcome.nothing-written-but-wrote": 2,
    "outcome.applied-but-absent": None,
    "outcome.unnamed-failure": None,
    "outcome.not-ended": None,
    "versions.gap": None,
    "versions.v0-ahead": None,
    "versions.v0-ahead-told-nothing": 2,  # its writer was told a failure that writes nothing
    "versions.content": None,
    "versions.ratchet": None,
    # import
    "import.skipped-never-applied": 3,
    "import.applied-twice": 4,
    "import.not-last": 4,
    "import.deep-aborts": 5,
    "import.not-utf8-applied": 6,
    "import.bad-checkpoint-traceback": 7,
    "import.bad-checkpoint-accepted": 7,
    "import.exit-status": None,
    "import.record-missing": None,
    "import.crash": None,
    # audit
    "audit.relaundered": 9,
    "audit.adopted-legacy-rewritten": 10,
    "audit.export-accepted": 11,
    "audit.edit-accepted": None,
    "audit.edit-not-named": None,
    "audit.false-alarm": None,
    # redaction
    "redaction.served": 8,
    "redaction.asof-redactor": 15,
    # principals
    "principals.body-swapped": 12,
    "principals.inactive-or-expired": 13,
    "principals.path-admitted": 14,
    "principals.unauthenticated": None,
    "principals.iam-denied-recorded": None,  # issue 33's (IAM evaluated on the embedded API), not one of the fifteen
    # the simulation itself
    "simulation.error": None,
}


@dataclass
class Violation:
    promise: str  # a key of PROMISES
    code: str  # a key of SEAMS
    text: str
    op: int = -1  # the index of the operation it was seen in
    entity: str | None = None
    seam: int | None = field(default=None)

    def __post_init__(self) -> None:
        if self.code not in SEAMS:
            raise ValueError(f"unknown violation code {self.code!r}")
        if self.promise not in PROMISES and self.promise != "simulation":
            raise ValueError(f"unknown promise {self.promise!r}")
        self.seam = SEAMS[self.code]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        where = f"op {self.op}" + (f", {self.entity!r}" if self.entity else "")
        seam = f"seam {self.seam}" if self.seam else "other"
        return f"[{seam}] {self.promise}/{self.code} ({where}): {self.text}"


def seams_of(violations: list[Violation]) -> list[int]:
    return sorted({v.seam for v in violations if v.seam})
