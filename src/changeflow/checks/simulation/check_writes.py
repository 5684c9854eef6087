"""Two promises, checked the way Elle checks a history: from what each execution was told and what the
table holds, never from what the code did.

**Every outcome told is true** (docs/workflow.md, "Outcomes" and the named failures): ``applied``, version n
means the history holds version n of this change; ``stale`` and ``duplicate`` mean this execution wrote
nothing (a write whose answer was lost is reported ``applied`` by the execution that wrote it); a failure
named as one that writes nothing (``ValidationError``, ``NotFound``, ``VersionConflict``, ``Forbidden``,
``LatestReadFailed``, ``LatestWriteFailed``, ``ReportFailed``) means no item, in history or ``v0``, names
this execution. ``HistoryWriteFailed`` says the version is in ``v0`` and not yet in history. An outcome the
workflow cannot know is told as the named error ``OutcomeUnknown`` (the shared contract of issue 32):
always truthful. Any other ending (an unnamed error, a timeout) tells the caller nothing true.

**No version lost, doubled or reverted**: versions contiguous from 1; ``v0`` is the newest version, or one
ahead of history only while its writer was told ``HistoryWriteFailed`` or ``OutcomeUnknown``; no change
wrote two versions; effective times never go back (the ratchet); each version's content is its change
applied to the version before it (put: its attributes; patch: the predecessor with the patch; rollback:
its source's content; delete: none)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..reliability import apply_patch
from .world import Run, World

WRITES_NOTHING = {"ValidationError", "NotFound", "VersionConflict", "Forbidden", "LatestReadFailed",
                  "LatestWriteFailed", "ReportFailed"}
V0_ONLY = {"HistoryWriteFailed"}  # the version is in v0, not yet in history (the next change repairs it)
UNKNOWN = "OutcomeUnknown"


def _written_by(state: dict[str, Any], arn: str) -> list[dict[str, Any]]:
    found = [v for v in state["versions"] if v.get("executionArn") == arn]
    latest = state["latest"]
    if latest and latest.get("executionArn") == arn and all(v["version"] != latest["version"] for v in found):
        found.append(latest)
    return found


def check_outcomes(world: World, entity: str, runs: list[Run]) -> None:
    state = world.cf.entity(entity)
    for run in runs:
        if not run.told:
            continue
        status, said = run.told[-1]
        cid = run.request.get("changeId")
        wrote = _written_by(state, run.arn)
        numbers = [v["version"] for v in wrote]
        tell = f"{run.name} ({run.request.get('operation')} {cid}) was told {status} {said}"
        if said == UNKNOWN:  # FAILED to Step Functions, shown UNKNOWN by the client: truthful whatever happened
            continue
        if status == "SUCCEEDED":
            output = run.execution.output if run.execution and isinstance(run.execution.output, dict) else {}
            if said == "applied":
                version = output.get("version")
                mine = [v for v in state["versions"] if v["version"] == version and v.get("changeId") == cid]
                if not mine:
                    world.violation("outcomes", "outcome.applied-but-absent",
                                    f"{tell} version {version}, which history does not hold", entity)
            elif said == "stale" and wrote:
                world.violation("outcomes", "outcome.stale-but-wrote",
                                f"{tell}, but it wrote version(s) {numbers}", entity)
            elif said == "duplicate" and wrote:
                world.violation("outcomes", "outcome.duplicate-but-wrote",
                                f"{tell}, but it wrote version(s) {numbers} itself", entity)
            elif said not in ("applied", "stale", "duplicate"):
                world.violation("outcomes", "outcome.unnamed-failure", f"{tell}: not an outcome", entity)
        elif status == "FAILED":
            if said in V0_ONLY:
                continue
            if said in WRITES_NOTHING:
                if wrote:
                    world.violation("outcomes", "outcome.nothing-written-but-wrote",
                                    f"{tell} (nothing written), but it wrote version(s) {numbers}", entity)
            else:
                world.violation("outcomes", "outcome.unnamed-failure",
                                f"{tell}: not one of the workflow's named errors", entity)
        else:
            world.violation("outcomes", "outcome.not-ended", f"{tell}", entity)


def check_versions(world: World, entity: str, imported: bool = False) -> None:
    """``imported``: the entity's changes came from an import (doubles are the import checker's)."""
    state = world.cf.entity(entity)
    versions, latest = state["versions"], state["latest"]
    numbers = [v["version"] for v in versions]
    window = int(world.config.get("HistoryRetentionVersions") or 0)
    newest = max(numbers + [latest["version"] if latest else 0])
    # a retention window of K versions lets versions up to v0's - K go (docs/audit.md, what may be absent)
    gone = [m for m in range(1, (numbers[-1] if numbers else 0) + 1)
            if m not in numbers and not (window and m <= newest - window)]
    if gone:
        world.violation("versions", "versions.gap", f"versions {gone} missing from history {numbers}", entity)
    if latest is not None:
        top = numbers[-1] if numbers else 0
        if latest["version"] > top:
            writer = next((r for r in world.runs if r.arn == latest.get("executionArn")), None)
            excused = writer is not None and writer.told and writer.told[-1][1] in (V0_ONLY | {UNKNOWN})
            if latest["version"] > top + 1 or not excused:
                said = writer.told if writer else "no execution of this run"
                told_nothing = bool(writer and writer.told and writer.told[-1][1] in WRITES_NOTHING)
                world.violation("versions", "versions.v0-ahead-told-nothing" if told_nothing else "versions.v0-ahead",
                                f"v0 is version {latest['version']}, history ends at {top} (its writer was told "
                                f"{said})", entity)
        elif latest["version"] < top:
            world.violation("versions", "versions.v0-ahead", f"v0 is version {latest['version']} behind history's "
                            f"{top}", entity)
    doubled = {cid: [v["version"] for v in versions if v.get("changeId") == cid]
               for cid, n in Counter(v.get("changeId") for v in versions).items() if n > 1}
    if doubled and not imported:
        world.violation("versions", "versions.doubled", f"a change wrote two versions: {doubled}", entity)
    for before, after in zip(versions, versions[1:]):
        if after["effectiveAt"] < before["effectiveAt"]:
            world.violation("versions", "versions.ratchet", f"version {after['version']}'s effectiveAt "
                            f"{after['effectiveAt']} is older than version {before['version']}'s", entity)
    _check_contents(world, entity, versions)


def _check_contents(world: World, entity: str, versions: list[dict[str, Any]]) -> None:
    requests = {r.request.get("changeId"): r.request for r in world.executions_of(entity)}
    by_number = {v["version"]: v for v in versions}
    for v in versions:
        request = requests.get(v.get("changeId"))
        if request is None or v.get("redacted") or v.get("operation") != request.get("operation"):
            continue
        operation, expected = request["operation"], None
        before = by_number.get(v["version"] - 1)
        if operation == "put":
            expected = request.get("attributes")
        elif operation == "patch" and before is not None and not before.get("redacted"):
            expected = apply_patch(before["attributes"], request.get("set", {}), request.get("remove", []))
        elif operation == "rollback":
            source = by_number.get(request.get("toVersion"))
            expected = source["attributes"] if source is not None and not source.get("redacted") else None
        elif operation == "delete":
            expected = {}
        if expected is not None and v["attributes"] != expected:
            world.violation("versions", "versions.content", f"version {v['version']} ({operation} "
                            f"{v.get('changeId')}) holds {v['attributes']}, not {expected}", entity)
        if v["deleted"] != (operation == "delete"):
            world.violation("versions", "versions.content", f"version {v['version']}'s deleted flag does not "
                            f"match its {operation}", entity)
