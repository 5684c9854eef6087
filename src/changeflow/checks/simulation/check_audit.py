"""**verify, verify --since-digest, verify-proof and verify-export refuse every insider edit, naming it**
(docs/audit.md, docs/transfer.md), as their documentation scopes each:

- ``changeflow verify ENTITY`` (and ``--executions``) names the first version whose content, metadata or
  order no longer matches: every table edit but two, which it cannot see by design: a rewrite that
  recomputed every hash (a digest catches it) and a version appended with a right hash (its execution
  does: ``--executions``). Once adoption is closed, an entity stripped and adopted again is still caught
  ("a stripped entity cannot be laundered by adopting it again"); an adopted legacy version rewritten is
  caught ("versions 1..k, adopted at version m, changed since").
- ``verify ENTITY --since-digest FILE`` (the auditor's copy, kept outside the account) refuses any edit of
  a version the digest committed to, and any digest file that was altered.
- ``verify-export FILE --digest D`` refuses every edit of the file or of its digest: "an altered version, a
  version or an entity removed or added".
- ``verify-proof`` refuses a proof altered in any bit.

"Naming it": a problem names a version the edit touched, or its neighbour (a version stripped of its chain
is found where the next version no longer follows it). Before the edit, the same commands must pass (no
false alarm): an audit that cries wolf is no audit."""

from __future__ import annotations

import random
import re
from typing import Any

from .insider import Edit, file_tactic, table_tactic
from .world import Result, World

_NAMED = re.compile(r"versions? (\d+)(?:\.\.(\d+))?")
SEAM_OF_TACTIC = {"launder": "audit.relaundered", "rewrite-legacy": "audit.adopted-legacy-rewritten"}


def mentioned(problems: list[str]) -> set[int]:
    found: set[int] = set()
    for problem in problems:
        for first, last in _NAMED.findall(problem):
            found.update(range(int(first), int(last or first) + 1))
    return found


def _verify_report(result: Result) -> tuple[list[str], set[int]]:
    shown = result.json() or []
    reports = shown if isinstance(shown, list) else []
    problems = [p for r in reports if isinstance(r, dict) for p in r.get("problems", [])]
    missing = {n for r in reports if isinstance(r, dict) for n in r.get("missing", []) if isinstance(n, int)}
    return problems, mentioned(problems) | missing


def _export_refuses(result: Result, entity: str) -> bool:
    """Whether verify-export refused the file for ``entity`` (a problem naming it, or the digest or file
    as a whole), not only for other entities' problems."""
    shown = result.json() or {}
    problems = shown.get("problems", []) if isinstance(shown, dict) else []
    return bool(result.status) and any(p.startswith((f"{entity}:", "(digest)", "(file)", "line ")) for p in problems)


def _auditor_digest(world: World, name: str):
    """The auditor's own copy of digest ``name`` (kept outside the account), written for the command."""
    data = world.auditor.get(name)
    if data is None:
        return None
    path = world.workdir / "auditor" / f"{name}.digest.json"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return path


def _digest_head(world: World, name: str, entity: str) -> int | None:
    import json

    data = world.auditor.get(name)
    heads = json.loads(data)["entities"] if data else []
    return next((int(h["version"]) for h in heads if h["entityId"] == entity), None)


def _accepted(world: World, edit: Edit, command: str, code: str, result: Result, named: set[int] | None) -> None:
    what = f"{edit.tactic} of {edit.entity!r}" + (f" version(s) {edit.versions}" if edit.versions else "")
    if result.crashed:
        world.violation("audit", "audit.edit-accepted", f"{command} crashed after the insider's {what}: "
                        f"{result.crashed[-300:]}", edit.entity)
    elif result.status == 0:
        world.violation("audit", code, f"{command} exited 0 after the insider's {what}", edit.entity)
    elif named is not None and edit.versions and not (named & {n + d for n in edit.versions for d in (-1, 0, 1)}):
        world.violation("audit", "audit.edit-not-named", f"{command} refused the insider's {what} without "
                        f"naming a version it touched (it named {sorted(named)})", edit.entity)


def _pristine(world: World, op: dict[str, Any], entity: str) -> None:
    """Before the edit: the audit passes (no false alarm) on what the insider is about to touch."""
    if entity in world.tampered or (entity in world.legacy and not world.adopted(entity)):
        return
    checks = [("verify", world.cli("verify", entity, "--json"))]
    digest = _auditor_digest(world, op.get("digest", ""))
    if digest is not None and _digest_head(world, op["digest"], entity) is not None:
        checks.append(("verify --since-digest", world.cli("verify", entity, "--since-digest", digest, "--json")))
    export, export_digest = world.files.get(op.get("export", "")), world.files.get(op.get("export", "") + ".digest")
    if export is not None and export_digest is not None:
        result = world.cli("verify-export", export, "--digest", export_digest, "--json")
        if not _export_refuses(result, entity):  # other entities' problems are not this one's
            result = Result(0, result.out, result.err)
        checks.append(("verify-export", result))
    proof = world.files.get(op.get("proof", ""))
    if proof is not None and op.get("proof") in world.proven:
        checks.append(("verify-proof", world.cli("verify-proof", proof, "--digest",
                                                 world.files[world.proven[op["proof"]][2]])))
    for command, result in checks:
        if result.status != 0:
            world.violation("audit", "audit.false-alarm", f"{command} of untouched {entity!r} exited "
                            f"{result.status}: {(result.out + result.err)[:400]}", entity)


def run_insider(world: World, op: dict[str, Any]) -> None:
    entity, tactic, rng = op["entity"], op["tactic"], random.Random(op["seed"])
    _pristine(world, op, entity)
    if tactic.startswith(("digest-", "export-", "proof-")):
        edit = file_tactic(world, tactic, entity, rng, op)
    else:
        edit = table_tactic(world, tactic, entity, rng, op.get("version"))
    if edit is None:
        world.log.append(f"op {world.op}: the insider's {tactic} of {entity!r} found nothing to edit (skipped)")
        return
    world.log.append(f"op {world.op}: the insider's {edit.tactic} of {entity!r} {edit.versions} ({edit.target})")
    if edit.target == "table":
        world.tampered.add(entity)
        judge_table(world, edit, op)
    else:
        judge_file(world, edit, op)


def judge_table(world: World, edit: Edit, op: dict[str, Any]) -> None:
    code = SEAM_OF_TACTIC.get(edit.tactic, "audit.edit-accepted")
    may_pass_verify = edit.recomputed or edit.appended or (edit.tactic == "launder" and not world.closed)
    if not may_pass_verify:
        result = world.cli("verify", edit.entity, "--json")
        _accepted(world, edit, "verify", code, result, _verify_report(result)[1])
    if not (edit.recomputed or (edit.tactic == "launder" and not world.closed)):
        result = world.cli("verify", edit.entity, "--executions", "--json")
        _accepted(world, edit, "verify --executions", code, result, _verify_report(result)[1])
    digest = _auditor_digest(world, op.get("digest", ""))
    head = _digest_head(world, op.get("digest", ""), edit.entity) if digest else None
    if digest is not None and head is not None and not edit.appended and min(edit.versions or [head]) <= head:
        result = world.cli("verify", edit.entity, "--since-digest", digest, "--json")
        _accepted(world, edit, "verify --since-digest", code, result, None)


def judge_file(world: World, edit: Edit, op: dict[str, Any]) -> None:
    if edit.target == "digest":
        result = world.cli("verify", edit.entity, "--since-digest", edit.file, "--json")
        _accepted(world, edit, "verify --since-digest (an altered digest)", "audit.edit-accepted", result, None)
    elif edit.target == "export":
        result = world.cli("verify-export", edit.file, "--digest", world.files[op["export"] + ".digest"], "--json")
        if result.status and not _export_refuses(result, edit.entity):
            result = Result(0, result.out, result.err)  # refused for other entities' problems, not this edit
        _accepted(world, edit, "verify-export", "audit.export-accepted", result, None)
    elif edit.target == "proof" and op.get("proof") in world.proven:
        entity, version, digest = world.proven[op["proof"]]
        result = world.cli("verify-proof", edit.file, "--digest", world.files[digest])
        _accepted(world, edit, "verify-proof", "audit.edit-accepted", result, None)
