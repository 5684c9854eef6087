"""**Redacted content is gone everywhere it was served** (docs/audit.md, Redaction): once version n is
redacted, its content is served by no surface (the read API's latest state, its versions and each version,
its as-of reads, an export) unless a version that made content (a put, patch or rollback) and is not itself
redacted holds exactly that content: "the same data in other versions stays until they are redacted
too". Redacting the current version removes it from ``v0`` too. A copy made by a redaction or an adoption
(they carry the content of the version before them) is not such a version.

And an as-of read answers the version that made the content in effect, never a redaction version: a
redaction is not a change of content (its effectiveAt is its predecessor's), so the content it carries was
not made by its principal (docs/time-travel.md, docs/audit.md)."""

from __future__ import annotations

import urllib.parse
from typing import Any

from changeflow_core import codec, model

from .world import World

CONTENT_OPERATIONS = ("put", "patch", "rollback")


def surfaces(world: World, entity: str, export: bool) -> list[tuple[str, dict[str, Any]]]:
    """What each surface serves of ``entity``: ``(where, view)``, a view with ``version``, ``attributes`` and,
    where the surface says them, ``operation`` and ``principal``."""
    served: list[tuple[str, dict[str, Any]]] = []
    path = world.entity_path(entity)
    status, latest = world.http("GET", path)
    if status == 200 and isinstance(latest, dict):
        served.append(("GET /entities/{id}", latest))
    cursor, listed = None, []
    for _ in range(50):
        query = "?limit=100" + (f"&cursor={urllib.parse.quote(cursor)}" if cursor else "")
        status, page = world.http("GET", f"{path}/versions{query}")
        if status != 200 or not isinstance(page, dict):
            break
        listed.extend(page.get("items") or page.get("versions") or [])
        cursor = page.get("nextCursor")
        if not cursor:
            break
    served.extend(("GET /entities/{id}/versions", v) for v in listed if isinstance(v, dict))
    instants = set()
    for v in listed:
        if not isinstance(v, dict):
            continue
        status, one = world.http("GET", f"{path}/versions/{v.get('version')}")
        if status == 200 and isinstance(one, dict):
            served.append((f"GET /entities/{{id}}/versions/{v.get('version')}", one))
        if isinstance(v.get("effectiveAt"), int):
            instants.update({v["effectiveAt"], v["effectiveAt"] + 1})
    for instant in sorted(instants):
        status, one = world.http("GET", f"{path}?asOf={instant}")
        if status == 200 and isinstance(one, dict):
            served.append((f"GET /entities/{{id}}?asOf={instant}", {**one, "asOf": instant}))
    if export:
        out = world.workdir / f"reads-{world.op}.jsonl"
        result = world.cli("export", entity, "--output", out)
        if result.status == 0:
            import json

            for line in out.read_text(encoding="utf-8").splitlines():
                exported = json.loads(line)
                own = {k: v for k, v in exported["item"].items() if k not in model.RESERVED}
                content = codec.to_plain(codec.deserialize_item(own))
                served.append((f"export line of version {exported['version']}",
                               {"version": exported["version"], "attributes": content}))
    return served


def run_reads(world: World, op: dict[str, Any]) -> None:
    entity = op["entity"]
    if entity in world.tampered:
        return
    check_redaction(world, entity, surfaces(world, entity, bool(op.get("export"))))


def check_redaction(world: World, entity: str, served: list[tuple[str, dict[str, Any]]]) -> None:
    redacted = {n: world.contents[(entity, n)] for n in sorted(world.redacted.get(entity, ()))
                if (entity, n) in world.contents}
    table = world.cf.entity(entity)["versions"]
    legitimate = [v["attributes"] for v in table if v.get("operation") in CONTENT_OPERATIONS
                  and not v.get("redacted") and v["version"] not in redacted]
    for where, view in served:
        content = view.get("attributes")
        if content:
            for n, gone in redacted.items():
                if gone and content == gone and content not in legitimate:
                    world.violation("redaction", "redaction.served",
                                    f"{where} serves version {view.get('version')}'s content {content}, which is "
                                    f"version {n}'s, redacted (no version that made content holds it)", entity)
                    break
        if "asOf" in view and view.get("operation") == "redact":
            world.violation("redaction", "redaction.asof-redactor",
                            f"{where} answered version {view.get('version')}, a redaction, as the version in "
                            f"effect: its content shown with the redactor {view.get('principal')} as principal",
                            entity)
