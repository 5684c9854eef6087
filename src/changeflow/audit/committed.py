"""The table against every head the chain of digests committed (issue 35): ``verify --digests``'s second half.

For each entity the digests name, its history is read once, and

- every head any digest committed must still be in the table with the hash committed (a redaction keeps a
  version's hash; a version the retention window let go is no longer provable, not tampered with): a head
  whose version now has another hash means history was rewritten after that digest. When a later digest
  commits a head the rewritten table reaches, the chain of digests breaks there, and the finding names the
  last digest that committed the original chain and the first that committed the rewritten one: the rewrite
  happened between the two (``HistoryRewritten``);
- from the newest head committed to today, every version and link must hold, as ``verify --since-digest``
  checks it (``digests.since_head_in``: versions gone, a chain broken, v0 altered), and the entity as
  ``verify`` checks it (v0 against history, the ratchet, the patches, the retention window's expiries).

A later digest extends an earlier one exactly when every head of the earlier one is an ancestor of the
later one's in the entity's hash chain: with the chain recomputed from the table and each committed hash
found at its version in it, every committed head lies on that one chain."""

from __future__ import annotations

import time
from typing import Any

from changeflow_core import chain as hashchain
from changeflow_core import model

from .digestchain import Chain, Commitment
from .digests import numbered, raw_history, raw_latest, since_head_in
from .retention import retention_window
from .verify import verify


def _hashes(raw: list[dict[str, dict]], latest: dict[str, dict] | None) -> dict[int, str | None]:
    """The stored hash of each version the table holds (history, and v0's version)."""
    kept, _ = numbered(raw)
    found = {int(i[model.VERSION]["N"]): hashchain.stored_hash(i) for i in kept}
    if latest is not None and isinstance(latest.get(model.VERSION), dict):
        try:
            found.setdefault(int(latest[model.VERSION]["N"]), hashchain.stored_hash(latest))
        except (KeyError, ValueError):
            pass
    return found


def rewritten(entity_id: str, commitments: list[Commitment], hashes: dict[int, str | None]) -> str | None:
    """The ``HistoryRewritten`` finding of an entity whose table no longer holds a head a digest committed."""
    def holds(c: Commitment) -> bool | None:
        return None if c.version not in hashes else hashes[c.version] == c.chain_hash

    broken = [c for c in commitments if holds(c) is False]
    if not broken:
        return None
    first, last = broken[0], broken[-1]
    message = (f"HistoryRewritten: version {first.version} of {entity_id!r}, committed by digest #{first.sequence} "
               f"(taken {first.taken_at}), has another hash in the table now: history was rewritten after it")
    later = [c for c in commitments if c.sequence > last.sequence and holds(c)]
    if later:
        message += (f"; digest #{later[0].sequence} (taken {later[0].taken_at}) committed the rewritten chain "
                    f"(version {later[0].version}): the chain of digests breaks between digest #{last.sequence} "
                    f"(taken {last.taken_at}) and digest #{later[0].sequence}, when the rewrite was made")
    return message


def audit(client, chain: Chain, now_s: float | None = None, entities: set[str] | None = None) -> dict[str, list[str]]:
    """Per entity the digests name (or those of ``entities``), what the table no longer holds of what they
    committed; an empty dict when everything holds."""
    now_s = time.time() if now_s is None else now_s
    window = retention_window(client)
    problems: dict[str, list[str]] = {}
    for entity_id in sorted(chain.commitments):
        if entities is not None and entity_id not in entities:
            continue
        commitments = chain.commitments[entity_id]
        raw, latest = raw_history(client, entity_id), raw_latest(client, entity_id)
        found: list[str] = []
        finding = rewritten(entity_id, commitments, _hashes(raw, latest))
        if finding:
            found.append(finding)
        newest = commitments[-1]
        found.extend(p for p in since_head_in(entity_id, raw, latest, newest.version, newest.chain_hash, window, now_s)
                     if not (finding and "no longer has the hash the digest recorded" in p))
        found.extend(p for p in verify(client, entity_id, now_s).problems if p not in found)  # and as verify sees it
        if found:
            problems[entity_id] = found
    return problems


def summary(chain: Chain) -> dict[str, Any]:
    """The chain in one line's worth of fields (``verify --digests --json``)."""
    first, last = (chain.digests[0], chain.digests[-1]) if chain.digests else (None, None)
    return {"location": chain.location, "digests": len(chain.digests), "objects": chain.objects,
            "first": first and {"sequence": first.sequence, "takenAt": first.document["takenAt"]},
            "newest": last and {"sequence": last.sequence, "takenAt": last.document["takenAt"],
                                "hash": last.document["hash"], "root": last.document["root"]},
            "entities": len(chain.tree)}


def load_location(client, url: str) -> Chain:
    """The chain at an ``s3://bucket/prefix/`` address (to its newest digest), or up to the digest an
    ``s3://bucket/prefix/NNNNNNNNNNNN.json`` address names. ``digestchain.NotALocation`` for neither."""
    from .digestchain import Expected, load, parse_location, split_digest_key

    bucket, prefix = parse_location(url)
    prefix, upto = split_digest_key(prefix)
    return load(client.make("s3"), bucket, prefix, Expected.of(client), upto)


def as_heads_digest(chain: Chain) -> dict[str, Any]:
    """The heads after the chain's last digest as a ``changeflow-digest/1`` document (every head listed), for
    ``verify_since`` and what reads one."""
    heads = chain.tree.entries()
    last = chain.digests[-1].document
    return {"format": hashchain.DIGEST_FORMAT, "takenAt": last["takenAt"], "stateMachineArn": last["stateMachineArn"],
            "table": last["historyTable"], "entities": heads, "root": hashchain.merkle_root(heads)}
