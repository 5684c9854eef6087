"""The Merkle structure a chained digest (``changeflow-digest/2``, issue 35) commits to: every entity's head
(entity id, version, chain hash), in a tree that a digest of a million entities updates in time proportional
to the entities that changed, not to all of them.

The tree has two levels:

- **buckets**: an entity's bucket is the first 16 bits of ``SHA-256("changeflow/digest/v2/bucket" 0x00 ||
  entityId)``. A bucket's root is the Merkle root of its heads sorted by entity id, the same tree as a
  format-1 digest's (``chain.merkle_root``: leaves and nodes domain-separated, as in RFC 6962);
- **the top**: a sparse Merkle tree of depth 16 over the 65,536 bucket roots (an empty bucket is
  ``SHA-256("")``, an empty subtree the hash of two empty ones), its nodes ``SHA-256(0x02 || left ||
  right)``, a prefix neither a leaf (0x00) nor a bucket node (0x01) has.

A change to one entity recomputes its bucket's root (about 15 heads at a million entities) and the 16 nodes
above it. An inclusion proof is the leaf's path in its bucket (``index``, ``size``, ``path``, as
``chain.merkle_path``) and the 16 siblings from the bucket up (``top``).

What a digest is (its fields, its hash) is ``digestformat``'s; this module only computes roots."""

from __future__ import annotations

import hashlib
from typing import Any, Iterable

from .chain import _leaf as leaf_hash
from .chain import _next_level as next_level

BUCKET_BITS = 16
BUCKET_TAG = b"changeflow/digest/v2/bucket\x00"
EMPTY_BUCKET = hashlib.sha256(b"").digest()


def bucket_of(entity_id: str) -> int:
    """The bucket of an entity: the first 16 bits of a tagged SHA-256 of its id."""
    digest = hashlib.sha256(BUCKET_TAG + entity_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:2], "big") >> (16 - BUCKET_BITS)


def top_node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x02" + left + right).digest()


def _empty_levels() -> list[bytes]:
    """``EMPTY[d]``: the root of an empty subtree whose leaves are ``d`` levels below it."""
    levels = [EMPTY_BUCKET]
    for _ in range(BUCKET_BITS):
        levels.append(top_node(levels[-1], levels[-1]))
    return levels


EMPTY = _empty_levels()


def _bucket_root(leaves: list[tuple[bytes, bytes]]) -> bytes:
    """The root of one bucket's leaves, ``(entity id bytes, leaf hash)`` pairs in any order."""
    level = [hashed for _, hashed in sorted(leaves)]
    if not level:
        return EMPTY_BUCKET
    while len(level) > 1:
        level = next_level(level)
    return level[0]


def _entry(entity_id: str, version: int, chain_hash: str | None) -> dict[str, Any]:
    return {"entityId": entity_id, "version": version, "chainHash": chain_hash}


class HeadTree:
    """Every entity's head and the tree over them, updated in place: ``put`` marks a bucket, ``root``
    recomputes the marked buckets and the top nodes above them only."""

    def __init__(self, heads: Iterable[dict[str, Any]] = ()) -> None:
        self.heads: dict[str, tuple[int, str | None]] = {}
        self._buckets: dict[int, dict[str, bytes]] = {}  # bucket -> entity id -> leaf hash
        self._levels: list[dict[int, bytes]] = [{} for _ in range(BUCKET_BITS + 1)]  # [depth][index], non-empty
        self._dirty: set[int] = set()
        for head in heads:
            self.put(head["entityId"], head["version"], head["chainHash"])

    def __len__(self) -> int:
        return len(self.heads)

    def get(self, entity_id: str) -> dict[str, Any] | None:
        found = self.heads.get(entity_id)
        return None if found is None else _entry(entity_id, *found)

    def entries(self) -> list[dict[str, Any]]:
        """Every head, sorted by entity id (UTF-8 bytes, as the tree sorts them)."""
        return [_entry(e, *self.heads[e]) for e in sorted(self.heads, key=lambda e: e.encode("utf-8", "surrogatepass"))]

    def put(self, entity_id: str, version: int, chain_hash: str | None) -> None:
        """Set an entity's head (a new one, or a replacement)."""
        self.heads[entity_id] = (version, chain_hash)
        bucket = bucket_of(entity_id)
        self._buckets.setdefault(bucket, {})[entity_id] = leaf_hash(_entry(entity_id, version, chain_hash))
        self._dirty.add(bucket)

    def root(self) -> str:
        """The tree's root (hex), after recomputing what ``put`` changed."""
        if self._dirty:
            self._update()
        return self._levels[0].get(0, EMPTY[BUCKET_BITS]).hex()

    def _update(self) -> None:
        depth, changed = BUCKET_BITS, self._dirty
        leaves = self._levels[depth]
        for bucket in changed:
            members = self._buckets.get(bucket, {})
            leaves[bucket] = _bucket_root([(e.encode("utf-8", "surrogatepass"), h) for e, h in members.items()])
        while depth > 0:
            below, above = self._levels[depth], self._levels[depth - 1]
            parents = {index >> 1 for index in changed}
            empty = EMPTY[BUCKET_BITS - depth]
            for parent in parents:
                left, right = below.get(2 * parent, empty), below.get(2 * parent + 1, empty)
                above[parent] = top_node(left, right)
            changed, depth = parents, depth - 1
        self._dirty = set()

    def path(self, entity_id: str) -> dict[str, Any] | None:
        """The inclusion proof of an entity's head: ``index``, ``size`` and ``path`` in its bucket (as
        ``chain.merkle_path``) and ``top``, the 16 sibling hashes from its bucket to the root (hex)."""
        if entity_id not in self.heads:
            return None
        self.root()
        bucket = bucket_of(entity_id)
        members = sorted((e.encode("utf-8", "surrogatepass"), h) for e, h in self._buckets[bucket].items())
        index = next(i for i, (e, _) in enumerate(members) if e == entity_id.encode("utf-8", "surrogatepass"))
        level, position, path = [h for _, h in members], index, []
        while len(level) > 1:
            sibling = position - 1 if position % 2 else position + 1
            if sibling < len(level):
                path.append(level[sibling].hex())
            level, position = next_level(level), position // 2
        top, position = [], bucket
        for depth in range(BUCKET_BITS, 0, -1):
            top.append(self._levels[depth].get(position ^ 1, EMPTY[BUCKET_BITS - depth]).hex())
            position >>= 1
        return {"index": index, "size": len(members), "path": path, "top": top}


def root_of(heads: Iterable[dict[str, Any]]) -> str:
    """The tree's root over ``heads`` (each ``{entityId, version, chainHash}``, no entity twice)."""
    return HeadTree(heads).root()


def root_from_top(bucket_root: bytes, bucket: int, top: list[str]) -> str | None:
    """The root that a bucket's root reaches through its 16 siblings (``HeadTree.path``'s ``top``); None
    when ``top`` is not 16 hashes."""
    if len(top) != BUCKET_BITS:
        return None
    node, position = bucket_root, bucket
    for sibling in top:
        other = bytes.fromhex(sibling)
        node = top_node(other, node) if position & 1 else top_node(node, other)
        position >>= 1
    return node.hex()
