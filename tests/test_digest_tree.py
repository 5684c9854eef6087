"""The Merkle structure a chained digest commits to (changeflow_core.digesttree, issue 35): updated in place,
it always has the root the same heads give from scratch; each head's path leads to that root and to no other;
the tree's shape does not depend on the order heads arrive in."""

from __future__ import annotations

import hashlib
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from changeflow_core import chain, digesttree
from changeflow_core.digesttree import HeadTree


def head(entity: str, version: int) -> dict:
    return {"entityId": entity, "version": version, "chainHash": hashlib.sha256(f"{entity}/{version}".encode()).hexdigest()}


ENTITY = st.text(min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(ENTITY, st.integers(1, 50)), min_size=1, max_size=60))
def test_a_tree_updated_in_place_has_the_root_the_same_heads_give_from_scratch(writes):
    tree, latest = HeadTree(), {}
    for position, (entity, version) in enumerate(writes):
        tree.put(entity, version, head(entity, version)["chainHash"])
        latest[entity] = head(entity, version)
        if position % 7 == 0:
            tree.root()  # roots taken along the way: the buckets marked since are all recomputed
    shuffled = list(latest.values())
    random.Random(len(writes)).shuffle(shuffled)
    assert tree.root() == digesttree.root_of(shuffled) == HeadTree(latest.values()).root()


@settings(max_examples=40, deadline=None)
@given(st.sets(ENTITY, min_size=1, max_size=40))
def test_every_heads_path_leads_to_the_root_and_another_head_does_not(entities):
    tree = HeadTree(head(e, 1) for e in entities)
    root = tree.root()
    for entity in entities:
        proof = tree.path(entity)
        bucket_root = chain.root_from_path(head(entity, 1), proof["index"], proof["size"], proof["path"])
        assert digesttree.root_from_top(bytes.fromhex(bucket_root), digesttree.bucket_of(entity), proof["top"]) == root
        forged = chain.root_from_path(head(entity, 2), proof["index"], proof["size"], proof["path"])
        assert digesttree.root_from_top(bytes.fromhex(forged), digesttree.bucket_of(entity), proof["top"]) != root


def test_each_head_and_nothing_else_moves_the_root():
    tree = HeadTree(head(f"e{i}", 1) for i in range(200))
    before = tree.root()
    tree.put("e7", 1, head("e7", 1)["chainHash"])
    assert tree.root() == before  # the same head again
    tree.put("e7", 2, head("e7", 2)["chainHash"])
    assert tree.root() != before
    assert HeadTree().root() == digesttree.EMPTY[digesttree.BUCKET_BITS].hex()  # the empty tree, by definition


def test_an_update_recomputes_one_bucket_and_sixteen_nodes_not_the_tree():
    tree = HeadTree(head(f"e{i}", 1) for i in range(5_000))
    tree.root()
    calls = []
    real = digesttree.top_node
    digesttree.top_node = lambda left, right: calls.append(1) or real(left, right)
    try:
        tree.put("e42", 2, head("e42", 2)["chainHash"])
        tree.root()
    finally:
        digesttree.top_node = real
    assert len(calls) == digesttree.BUCKET_BITS


def test_entities_spread_over_the_buckets():
    buckets = [digesttree.bucket_of(f"user#{i}") for i in range(100_000)]
    assert len(set(buckets)) > 45_000 and max(buckets) < 2 ** digesttree.BUCKET_BITS
