"""Issue 22.4: a proof of one version against a digest (QLDB's GetRevision with a digest).

GIVEN a digest an auditor kept outside the account, `changeflow proof ENTITY VERSION --digest FILE` writes a
self-contained proof, and `changeflow verify-proof PROOF --digest FILE` checks it with nothing else: no table,
no AWS client, no network. What an attacker would try: flip any bit of the proof (its text or any value in
it), prove a version written after the digest, pass a proof of one entity off as another's, drop links from
the chain, bring the Merkle path of another leaf, forge the digest, or make a proof from a table rewritten
with every hash recomputed. Each is refused, by name, in one line, with the documented exit status."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import types
from decimal import Decimal

import pytest
from boto3.dynamodb.types import Binary
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changeflow.audit import digests, proofs
from changeflow_core import chain, model

from conftest import ROOT
from test_tamper import ENTITY, T0, put, recompute_chain_from  # doc#7's changes, and the insider who recomputes every hash



# --- histories built as the write step seals them (no stack: the proof's checks are pure) ----------------
def version_item(entity_id: str, version: int, **content) -> dict:
    item = {
        model.PK: {"S": entity_id}, model.SK: {"S": model.history_sk(version)},
        model.VERSION: {"N": str(version)}, model.EFFECTIVE_AT: {"N": str(T0 + version)},
        model.CHANGE_ID: {"S": f"c{version}"}, model.OPERATION: {"S": "put"},
        model.ACTOR: {"S": "ana@example.com"}, model.REASON: {"S": "edit"},
        model.RECORDED_AT: {"N": str(T0 + 10 * version)},
        model.EXECUTION: {"S": f"arn:aws:states:us-east-1:123456789012:execution:sm:e{version}"},
    }
    item.update(chain.to_wire(content))
    return item


def every_type(version: int) -> dict:
    """Content with every DynamoDB type, so that every form a proof checks is flipped somewhere."""
    return {"title": f"v{version} é", "n": Decimal("1.5") * version, "big": Decimal("1E+40"), "small": Decimal("-1E-9"),
            "raw": Binary(bytes([version, 255, 0])), "ok": True, "none": None, "list": [1, "x", [False]],
            "map": {"k": Decimal(version), "ü": "v"}, "tags": {"a", "b"}, "nums": {Decimal(1), Decimal("2.5")},
            "blobs": {Binary(b"\x01"), Binary(b"\x02\x03")}}


def sealed_history(entity_id: str, contents: list[dict], seal=chain.seal) -> list[dict]:
    """As the write step seals them: format 2 with prevHash (a retention window) by default; ``seal`` may be
    ``chain.seal_v1`` (items written before format 2) or ``without_prev`` (format 2, no retention window)."""
    history, prev = [], chain.genesis(entity_id)
    for n, content in enumerate(contents, start=1):
        history.append(seal(version_item(entity_id, n, **content), prev))
        prev = chain.stored_hash(history[-1])
    return history


def without_prev(item: dict, prev: str) -> dict:
    return chain.seal(item, prev, keep_prev=False)


def digest_of(histories: dict[str, list[dict]], taken: str = "2026-11-24T22:00:00+00:00") -> dict:
    """A digest as `changeflow digest --all` writes it, of each entity's newest version."""
    heads = [chain.head(e, h[-1]) for e, h in histories.items()]
    document = {"format": chain.DIGEST_FORMAT, "takenAt": taken, "stateMachineArn": "arn:sm", "table": "t",
                "entities": sorted(heads, key=lambda h: h["entityId"]), "root": chain.merkle_root(heads)}
    return json.loads(json.dumps(document))


@pytest.fixture(scope="module", params=["format 2", "format 2 without prevHash", "format 1"])
def world(request):
    """Three entities (the Merkle tree has an odd leaf); doc#7 has four versions of every type."""
    seal = {"format 2": chain.seal, "format 2 without prevHash": without_prev, "format 1": chain.seal_v1}[request.param]
    histories = {ENTITY: sealed_history(ENTITY, [every_type(n) for n in range(1, 5)], seal),
                 "doc#1": sealed_history("doc#1", [{"t": "a"}], seal),
                 "doc#9": sealed_history("doc#9", [{"t": "b"}, {"t": "c"}], seal)}
    return histories, digest_of(histories)


def proof_of(histories, digest, entity_id=ENTITY, version=2) -> dict:
    head = next(h["version"] for h in digest["entities"] if h["entityId"] == entity_id)
    before = histories[entity_id][version - 2] if version > 1 else None
    return proofs.make_proof(entity_id, version, histories[entity_id][version - 1:head], digest, before)


def refused(proof, digest, **asked) -> str:
    """The name a proof is refused under: ``Invalid`` for its form, else ProofRejected's name."""
    try:
        proofs.verify_proof(proof, digests.parse_digest(digest), **asked)
    except proofs.ProofInvalid:
        return "Invalid"
    except proofs.ProofRejected as exc:
        return exc.name
    return ""


# --- the Merkle path -------------------------------------------------------------------------------------
def test_every_leafs_path_leads_to_the_root_digests_have_always_had_for_trees_of_1_to_40_leaves():
    for size in range(1, 41):
        heads = [{"entityId": f"e{i:02d}", "version": i + 1, "chainHash": f"{i:064x}"} for i in range(size)]
        root = chain.merkle_root(heads)
        for head in heads:
            path = chain.merkle_path(heads, head["entityId"])
            assert chain.root_from_path(head, path["index"], path["size"], path["path"]) == root
            assert len(path["path"]) <= max(1, (size - 1).bit_length())
            other = {**head, "version": head["version"] + 1}
            assert chain.root_from_path(other, path["index"], path["size"], path["path"]) != root
    assert chain.merkle_path(heads, "absent") is None
    # the roots digests taken before proofs existed have (computed by main's merkle_root before this change)
    assert chain.merkle_root(heads[:3]) == "5d977ac80554275692a30d27e6e6d09eac0345c711c38296d7b0374fa669e03b"
    assert chain.merkle_root(heads[:7]) == "dc5ce9f4644526dc289ae869d6140b36bd319c5eac8829952b0953f24b8e3450"


# --- the proof holds ---------------------------------------------------------------------------------------
def test_a_proof_of_each_version_verifies_offline_and_says_what_it_proved(world):
    histories, digest = world
    for entity_id, history in histories.items():
        for version in range(1, len(history) + 1):
            proof = proofs.loads(proofs.dumps(proof_of(histories, digest, entity_id, version)))
            proven = proofs.verify_proof(proof, digests.parse_digest(digest), entity_id=entity_id, version=version)
            assert (proven["entityId"], proven["version"], proven["head"]) == (entity_id, version, len(history))
            assert proven["changeId"] == f"c{version}" and proven["root"] == digest["root"]
            assert len(proof["links"]) == len(history) - version
    proof = proof_of(histories, digest)
    assert model.PK not in proof["item"] and model.SK not in proof["item"]  # what the chain does not cover
    assert proof["item"]["big"] == {"N": "10000000000000000000000000000000000000000"}  # plain, one form


# --- every single-bit change is refused ------------------------------------------------------------------
def _spots(node, path=()):
    """Every key and every leaf value (string, number, boolean) of a JSON document, by its path."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield ("key", path, key)
            yield from _spots(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _spots(value, (*path, i))
    else:
        yield ("value", path, node)


def _flips(value):
    """Every value one bit away from ``value``: each bit of a string's UTF-8 bytes (an invalid byte kept
    as a lone surrogate, as a careless decoder would), of an integer up to one bit past its length, a
    boolean negated."""
    if isinstance(value, bool):
        yield not value
    elif isinstance(value, int):
        for bit in range(value.bit_length() + 2):
            yield value ^ (1 << bit)
    elif isinstance(value, str):
        raw = value.encode("utf-8")
        for i in range(len(raw)):
            for bit in range(8):
                yield (raw[:i] + bytes([raw[i] ^ (1 << bit)]) + raw[i + 1:]).decode("utf-8", "surrogateescape")


def _with(document, kind, path, old, new):
    copy = json.loads(json.dumps(document))
    node = copy
    for step in path[:-1] if kind == "value" else path:
        node = node[step]
    if kind == "value":
        node[path[-1]] = new
    else:
        node[new] = node.pop(old)
    return copy


def single_bit_changes(document):
    for kind, path, old in _spots(document):
        for new in _flips(old):
            yield _with(document, kind, path, old, new)


def test_every_single_bit_change_to_any_value_or_key_of_a_proof_is_refused(world):
    """Exhaustive: the item (every DynamoDB type), each link, the Merkle path, the digest's root and time,
    the version, the entity id, the format, and every key's name."""
    histories, digest = world
    proof = proof_of(histories, digest, version=3)
    names, tried = {}, 0
    for changed in single_bit_changes(proof):
        tried += 1
        name = refused(changed, digest)
        assert name, f"a single-bit change was not refused: {json.dumps(changed)[:300]}"
        names[name] = names.get(name, 0) + 1
    assert tried > 9_000  # 9,161 to 10,225 by chain format
    assert {"Invalid", "ChainBroken", "MerklePathMismatch", "OtherDigest", "EntityNotInDigest"} <= set(names), names


def test_every_single_bit_change_to_the_proof_file_is_refused(world):
    """Exhaustive, on the bytes `changeflow proof` writes: a flip in a value, in the JSON's syntax or in the
    white space between (which a lenient reader would not notice) is refused."""
    histories, digest = world
    text = proofs.dumps(proof_of(histories, digest, version=4)).encode("utf-8")
    parsed = digests.parse_digest(digest)
    assert proofs.verify_proof(proofs.loads(text), parsed)["version"] == 4
    for i in range(len(text)):
        for bit in range(8):
            flipped = text[:i] + bytes([text[i] ^ (1 << bit)]) + text[i + 1:]
            with pytest.raises((proofs.ProofInvalid, proofs.ProofRejected)):
                proofs.verify_proof(proofs.loads(flipped), parsed)


def test_every_single_bit_change_to_a_stored_version_makes_its_proof_fail(world):
    """The version changed in the table (any attribute's value, any attribute's name), then proven: the
    recomputed chain no longer reaches the head the digest recorded."""
    histories, digest = world
    stored = {name: proofs.portable(value) for name, value in histories[ENTITY][1].items()}  # as JSON holds it
    tried = 0
    for changed in single_bit_changes(stored):
        try:
            if proofs.proof_item(changed) == proofs.proof_item(stored):
                continue  # the key, or a form of the same value ("2.50" for 2.5): not a change to what is stored
            proof = proofs.make_proof(ENTITY, 2, [changed, *histories[ENTITY][2:]], digests.parse_digest(digest))
        except (ValueError, TypeError, AttributeError):
            continue  # not a value DynamoDB could hold (a number that is not one, base64 that is not, no type)
        tried += 1
        assert refused(proof, digest), json.dumps(changed)[:300]
    assert tried > 2_000


contents = st.lists(st.dictionaries(st.sampled_from(["a", "b", "n"]),
                                    st.one_of(st.text(max_size=4), st.integers(-10**6, 10**6), st.booleans()),
                                    max_size=3), min_size=1, max_size=5)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(contents, min_size=1, max_size=5), st.data())
def test_property_random_histories_prove_and_any_flipped_bit_is_refused(histories_contents, data):
    histories = {f"e{i}": sealed_history(f"e{i}", [{k: (Decimal(v) if type(v) is int else v) for k, v in c.items()}
                                                   for c in cs]) for i, cs in enumerate(histories_contents)}
    digest = digest_of(histories)
    entity_id = data.draw(st.sampled_from(sorted(histories)))
    version = data.draw(st.integers(1, len(histories[entity_id])))
    proof = proof_of(histories, digest, entity_id, version)
    assert proofs.verify_proof(proofs.loads(proofs.dumps(proof)), digests.parse_digest(digest))["version"] == version
    # any spot with a bit to flip (an empty string has none: a content of {"a": ""} made the draw fail)
    kind, path, old = data.draw(st.sampled_from([spot for spot in _spots(proof) if any(True for _ in _flips(spot[2]))]))
    new = data.draw(st.sampled_from(list(_flips(old))))
    assert refused(_with(proof, kind, path, old, new), digest)


# --- refused by name ---------------------------------------------------------------------------------------
def test_a_proof_of_a_version_written_after_the_digest_is_refused_by_name(world):
    histories, digest = world
    later = {**histories, ENTITY: sealed_history(ENTITY, [every_type(n) for n in range(1, 6)])}
    newer_digest = digest_of(later, taken="2026-11-24T23:00:00+00:00")
    proof = proof_of(later, newer_digest, version=5)
    assert refused(proof, newer_digest) == ""
    with pytest.raises(proofs.ProofRejected, match=r"^VersionAfterDigest: version 5 of 'doc#7' was written after "
                                                  r"the digest taken 2026-11-24T22:00:00\+00:00, which recorded "
                                                  r"version 4"):
        proofs.verify_proof(proof, digests.parse_digest(digest))
    # nor can one be made: the table's v0 (one read) says version 5 exists, so the digest is too old for it
    v0 = types.SimpleNamespace(table="t", dynamodb=types.SimpleNamespace(get_item=lambda **_: {"Item": later[ENTITY][-1]}))
    with pytest.raises(proofs.ProofRejected, match="^VersionAfterDigest"):
        proofs.prove(v0, ENTITY, 5, digest)
    # and a version the entity never had is named as such (issue 38.5), not as written after the digest
    with pytest.raises(proofs.ProofRejected, match=r"^NoSuchVersion: 'doc#7' has no version 6: its latest is version 5$"):
        proofs.prove(v0, ENTITY, 6, digest)


def test_a_proof_made_against_another_digest_is_refused_by_name(world):
    histories, digest = world
    other = digest_of({**histories, "doc#3": sealed_history("doc#3", [{"t": "x"}])})
    assert refused(proof_of(histories, digest), other) == "OtherDigest"


def test_a_proof_passed_off_as_another_entitys_is_refused(world):
    histories, digest = world
    proof = proof_of(histories, digest)
    assert refused(proof, digest, entity_id="doc#9") == "OtherEntity"
    assert refused(proof, digest, version=3) == "OtherVersion"
    assert refused({**proof, "entityId": "doc#9"}, digest) == "ChainPastHead"  # doc#9's head is version 2
    assert refused({**proof_of(histories, digest, version=3), "entityId": "doc#9"}, digest) == "VersionAfterDigest"
    first = proof_of(histories, digest, version=1)
    # cut to the other's length: version 1 chains from the genesis value of doc#7, not of the other
    assert refused({**first, "entityId": "doc#9", "links": first["links"][:1]}, digest) == "ChainBroken"
    assert refused({**first, "entityId": "doc#1", "links": []}, digest) == "ChainBroken"
    assert refused({**proof, "entityId": "doc#2"}, digest) == "EntityNotInDigest"


def test_a_truncated_chain_is_refused_by_name(world):
    histories, digest = world
    proof = proof_of(histories, digest, version=1)
    assert refused({**proof, "links": proof["links"][:-1]}, digest) == "ChainTruncated"
    assert refused({**proof, "links": []}, digest) == "ChainTruncated"
    assert refused({**proof, "links": proof["links"][:1] + proof["links"][2:]}, digest) == "ChainBroken"
    assert refused({**proof, "links": proof["links"][::-1]}, digest) == "ChainBroken"
    second = proof_of(histories, digest, version=2)
    unanchored = {k: v for k, v in second["item"].items() if k != chain.PREV_HASH}
    assert refused({**second, "item": unanchored}, digest) == "ChainBroken"  # its own link not recomputable
    extra = chain.seal(version_item(ENTITY, 5, title="later"), chain.stored_hash(proof["links"][-1]))
    assert refused({**proof, "links": [*proof["links"], proofs.proof_item(extra)]}, digest) == "ChainPastHead"


def test_a_merkle_path_for_another_leaf_is_refused_by_name(world):
    histories, digest = world
    proof = proof_of(histories, digest)
    for other in ("doc#1", "doc#9"):
        theirs = proof_of(histories, digest, other, 1)["merkle"]
        assert refused({**proof, "merkle": theirs}, digest) == "MerklePathMismatch"
        assert refused({**proof, "merkle": {**proof["merkle"], "path": theirs["path"]}}, digest) == "MerklePathMismatch"
    assert refused({**proof, "merkle": {**proof["merkle"], "path": proof["merkle"]["path"][:-1]}},
                   digest) == "MerklePathMismatch"
    assert refused({**proof, "merkle": {**proof["merkle"], "size": 5}}, digest) == "MerklePathMismatch"


def test_the_leaf_index_and_tree_size_are_bound_by_the_digest_not_only_by_the_paths_shape():
    """Index 0 of 5 leaves and of 7 have paths of the same shape (5 and 7 are one bit apart): the tree alone
    does not bind the size, so the checker takes it from the digest."""
    histories = {f"e{i}": sealed_history(f"e{i}", [{"t": str(i)}]) for i in range(5)}
    digest = digest_of(histories)
    proof = proof_of(histories, digest, "e0", 1)
    assert proof["merkle"]["size"] == 5 and refused(proof, digest) == ""
    assert chain.root_from_path(digest["entities"][0], 0, 7, proof["merkle"]["path"]) == digest["root"]
    assert refused({**proof, "merkle": {**proof["merkle"], "size": 7}}, digest) == "MerklePathMismatch"


NOT_THE_ONE_FORM = {  # the same thing proven, written another way: refused, so that no two proofs are equal
    "a number with a trailing zero": ("item", "n", {"N": "3.0"}),
    "a number with an exponent": ("item", "big", {"N": "1E+40"}),
    "binary in non-canonical base64": ("item", "blobs", {"BS": ["AR==", "AgM="]}),  # AQ== is b"\x01" too
    "a hash of 31 bytes, or in upper case": ("item", chain.CHAIN_HASH, None),
    "NULL false": ("item", "none", {"NULL": False}),
    "a set unsorted": ("item", "tags", {"SS": ["b", "a"]}),
    "the key, which the chain does not cover": ("item", model.PK, {"S": ENTITY}),
    "the expiry, which the chain does not cover": ("item", model.EXPIRES_AT, {"N": "1"}),
}


@pytest.mark.parametrize("case", sorted(NOT_THE_ONE_FORM))
def test_a_proof_in_another_form_of_the_same_values_is_refused(world, case):
    histories, digest = world
    proof = proof_of(histories, digest, version=3)
    part, name, value = NOT_THE_ONE_FORM[case]
    if value is None:  # format 2's 32 bytes cut to 31; format 1's hex in upper case
        (kind, hashed), = proof[part][name].items()
        value = {"B": base64.b64encode(base64.b64decode(hashed)[:31]).decode()} if kind == "B" else {"S": hashed.upper()}
    if name == "blobs":
        assert proof[part][name] == {"BS": ["AQ==", "AgM="]}
    if name == "n":
        assert proof[part][name] == {"N": "4.5"}
        value = {"N": "4.50"}
    assert refused({**proof, part: {**proof[part], name: value}}, digest) == "Invalid"


def test_a_forged_digest_is_refused(world):
    histories, digest = world
    proof = proof_of(histories, digest)
    entities = digest["entities"]
    altered = [{**entities[0], "version": entities[0]["version"] + 1}, *entities[1:]]
    assert refused(proof, {**digest, "entities": altered}) == "DigestAltered"
    assert refused(proof, {**digest, "root": "0" * 64}) == "DigestAltered"
    ours = next(i for i, e in enumerate(entities) if e["entityId"] == ENTITY)
    rehead = [dict(e) for e in entities]
    rehead[ours]["chainHash"] = "1" * 64  # a digest forged to match a rewritten table, root recomputed
    forged = {**digest, "entities": rehead, "root": chain.merkle_root(rehead)}
    assert refused(proof, forged) in ("OtherDigest", "HeadMismatch")
    assert refused({**proof, "digest": {**proof["digest"], "root": forged["root"]}}, forged) == "HeadMismatch"


FORGED_DIGESTS = {
    "entities as numbers": lambda d: {**d, "entities": [1, 2]},
    "no root": lambda d: {k: v for k, v in d.items() if k != "root"},
    "version 'abc'": lambda d: {**d, "entities": [{**d["entities"][0], "version": "abc"}, *d["entities"][1:]]},
    "version 1e400": lambda d: {**d, "entities": [{**d["entities"][0], "version": 1e400}, *d["entities"][1:]]},
    "version true": lambda d: {**d, "entities": [{**d["entities"][0], "version": True}, *d["entities"][1:]]},
    "numeric entityId": lambda d: {**d, "entities": [{**d["entities"][0], "entityId": 7}, *d["entities"][1:]]},
    "an entity twice": lambda d: {**d, "entities": [d["entities"][0], *d["entities"]]},
    "an upper-case hash": lambda d: {**d, "root": d["root"].upper()},
    "another format": lambda d: {**d, "format": "changeflow-digest/0"},
    "not an object": lambda d: [d],
    "no takenAt": lambda d: {k: v for k, v in d.items() if k != "takenAt"},
    "a takenAt of two lines": lambda d: {**d, "takenAt": "2026-11-24\nchangeflow: proven"},
}


@pytest.mark.parametrize("case", sorted(FORGED_DIGESTS))
def test_a_digest_of_the_wrong_shape_is_named_before_anything_is_computed(world, case):
    histories, digest = world
    with pytest.raises(digests.NotADigest):
        digests.parse_digest(json.loads(json.dumps(FORGED_DIGESTS[case](digest))))


def test_a_digest_as_changeflow_digest_writes_it_parses_unchanged(world):
    histories, digest = world
    assert digests.parse_digest(digest) == digest and digests.root_holds(digest)
    assert digests.parse_digest({**digest, "entities": [], "root": chain.merkle_root([])})["entities"] == []


# --- the command line ------------------------------------------------------------------------------------
def write_files(tmp_path, histories, digest, version=2):
    proof_file, digest_file = tmp_path / "proof.json", tmp_path / "digest.json"
    proof_file.write_text(proofs.dumps(proof_of(histories, digest, version=version)), encoding="utf-8", newline="")
    digest_file.write_text(json.dumps(digest), encoding="utf-8")
    return str(proof_file), str(digest_file)


@pytest.fixture
def offline(monkeypatch):
    """No network and no AWS client: constructing one, or opening any socket, fails the test."""
    import socket

    import boto3
    import botocore.session

    def forbidden(*args, **kwargs):
        raise AssertionError("verify-proof must not construct an AWS client nor open a socket")

    monkeypatch.setattr(botocore.session.Session, "create_client", forbidden)
    monkeypatch.setattr(boto3.session.Session, "client", forbidden)
    monkeypatch.setattr(socket.socket, "connect", forbidden)
    monkeypatch.setattr(socket, "create_connection", forbidden)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(key, raising=False)


def test_verify_proof_on_the_command_line_needs_nothing_but_its_two_files(world, tmp_path, capsys, offline):
    from changeflow import cli

    proof_file, digest_file = write_files(tmp_path, *world)
    assert cli.main(["verify-proof", proof_file, "--digest", digest_file]) == 0
    assert capsys.readouterr().out.startswith("proven: version 2 of 'doc#7' (change c2")
    assert cli.main(["verify-proof", proof_file, "--digest", digest_file, "--entity", ENTITY, "--version", "2",
                     "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["ok"] is True and answer["head"] == 4 and answer["item"]["title"] == {"S": "v2 é"}


EXPECTED = [  # (what is done to the files, exit status, the one line's start)
    ("another entity asked", ["--entity", "doc#9"], None, 1, "changeflow: proof refused: OtherEntity: "),
    ("truncated", [], lambda p, d: {**p, "links": p["links"][:-1]}, 1, "changeflow: proof refused: ChainTruncated: "),
    ("another leaf's path", [], lambda p, d: {**p, "merkle": {**p["merkle"], "index": 0}}, 1,
     "changeflow: proof refused: MerklePathMismatch: "),
    ("a flipped bit", [], lambda p, d: {**p, "item": {**p["item"], "title": {"S": "v2 è"}}}, 1,
     "changeflow: proof refused: ChainBroken: version 2: its content or metadata changed"),
    ("not a proof", [], lambda p, d: {"format": "x"}, 2, "changeflow: "),
]


@pytest.mark.parametrize("case", EXPECTED, ids=[c[0] for c in EXPECTED])
def test_verify_proof_refuses_in_one_line_with_its_exit_status(world, tmp_path, capsys, offline, case):
    from changeflow import cli

    _, extra, change, status, line = case
    proof_file, digest_file = write_files(tmp_path, *world)
    if change:
        changed = change(json.loads(open(proof_file, encoding="utf-8").read()), world[1])
        open(proof_file, "w", encoding="utf-8", newline="").write(proofs.dumps(changed))
    assert cli.main(["verify-proof", proof_file, "--digest", digest_file, *extra]) == status
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1 and "Traceback" not in err, err


def test_verify_proof_names_a_bad_file_in_one_line_with_status_2(world, tmp_path, capsys, offline):
    from changeflow import cli

    proof_file, digest_file = write_files(tmp_path, *world)
    reformatted = tmp_path / "pretty.json"
    reformatted.write_text(json.dumps(json.loads(open(proof_file, encoding="utf-8").read()), indent=2))
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps({**world[1], "entities": [{"entityId": 7, "version": "abc", "chainHash": None}]}))
    nested = tmp_path / "nested.json"  # JSON nested past the parser's depth
    nested.write_text("[" * 5000 + "]" * 5000)
    for argv, names in ([str(reformatted), "--digest", digest_file], "one form"), \
                       ([str(nested), "--digest", digest_file], "not a changeflow proof"), \
                       ([proof_file, "--digest", str(forged)], "entities[0].entityId is 7"), \
                       ([proof_file, "--digest", str(tmp_path / "absent.json")], "cannot read the digest"), \
                       ([str(tmp_path / "absent.json"), "--digest", digest_file], "cannot read the proof"):
        assert cli.main(["verify-proof", *argv]) == 2
        err = capsys.readouterr().err
        assert names in err and err.count("\n") == 1 and "Traceback" not in err, err
    altered = tmp_path / "altered.json"
    altered.write_text(json.dumps({**world[1], "root": "0" * 64}))
    assert cli.main(["verify-proof", proof_file, "--digest", str(altered)]) == 1
    assert capsys.readouterr().err.startswith("changeflow: proof refused: DigestAltered: ")


def test_verify_proof_runs_on_a_laptop_outside_the_project_with_no_credentials(world, tmp_path):
    """Another process, in another directory, with no AWS configuration and no project: sockets and AWS
    clients made to fail there too."""
    proof_file, digest_file = write_files(tmp_path, *world)
    guard = ("import socket, sys, botocore.session\n"
             "def no(*a, **k): raise SystemExit('verify-proof reached for the network or an AWS client')\n"
             "socket.socket.connect = no; socket.create_connection = no; botocore.session.Session.create_client = no\n"
             "from changeflow import cli\n"
             "sys.exit(cli.main(sys.argv[1:]))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CHANGEFLOW_"))}
    env.update(HOME=str(tmp_path), PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT / "layers" / "core")]))
    done = subprocess.run([sys.executable, "-c", guard, "verify-proof", proof_file, "--digest", digest_file],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("proven: version 2 of 'doc#7'"), done.stderr


# --- from a stack ----------------------------------------------------------------------------------------
@pytest.fixture
def recorded(cf):
    cf.submit(put(T0, "c1", title="one", n=1))
    cf.submit(put(T0 + 1, "c2", title="two", n=Decimal("2.50"), meta={"k": "v", "l": [1]}))
    cf.submit({"entityId": ENTITY, "operation": "delete", "effectiveAt": T0 + 2, "changeId": "c3"})
    cf.submit(put(T0 + 3, "c4", title="four"))
    cf.submit({**put(T0, "d1", title="other"), "entityId": "doc#8"})
    return cf


def test_proof_and_verify_proof_from_a_stack(recorded, tmp_path, capsys, monkeypatch):
    """What an auditor runs: a digest kept elsewhere; later, a proof of version 2 from the stack, checked
    with nothing but the two files (a tombstone in between). A version written after the digest is refused
    by name, and nothing is written."""
    from changeflow import cli
    from changeflow.client import targets

    monkeypatch.setattr(targets, "client_for", lambda args: recorded)
    kept, proof_file = tmp_path / "digest.json", tmp_path / "proof.json"
    assert cli.main(["digest", "--all", "--output", str(kept)]) == 0
    recorded.submit(put(T0 + 4, "c5", title="five"))
    assert cli.main(["proof", ENTITY, "2", "--digest", str(kept), "--output", str(proof_file)]) == 0
    assert cli.main(["verify-proof", str(proof_file), "--digest", str(kept)]) == 0
    assert "proven: version 2 of 'doc#7'" in capsys.readouterr().out
    proof = json.loads(proof_file.read_text(encoding="utf-8"))
    assert [int(i[model.VERSION]["N"]) for i in [proof["item"], *proof["links"]]] == [2, 3, 4]
    assert proof["item"]["n"] == {"N": "2.5"} and proof["links"][0][model.DELETED] == {"BOOL": True}

    later = tmp_path / "later.json"
    assert cli.main(["proof", ENTITY, "5", "--digest", str(kept), "--output", str(later)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("changeflow: proof refused: VersionAfterDigest: version 5 of 'doc#7' was written after")
    assert not later.exists()
    # a version the entity never had is not "written after the digest" (issue 38.5)
    assert cli.main(["proof", ENTITY, "9", "--digest", str(kept), "--output", str(later)]) == 1
    err = capsys.readouterr().err
    assert err == "changeflow: proof refused: NoSuchVersion: 'doc#7' has no version 9: its latest is version 5\n"
    assert not later.exists()
    assert cli.main(["proof", "doc#nobody", "1", "--digest", str(kept)]) == 1
    assert "no such entity" in capsys.readouterr().err


def _flipped(value: dict) -> dict | None:
    """An attribute value as the client returns it, one bit changed in its first leaf (None: nothing to flip)."""
    (kind, inner), = value.items()
    if kind in ("S", "N"):  # the last character: a number stays a number ("2.5" -> "2.4")
        return {kind: inner[:-1] + chr(ord(inner[-1]) ^ 1)}
    if kind == "BOOL":
        return {kind: not inner}
    if kind == "B":  # a format-2 hash: the client returns bytes
        return {kind: bytes([inner[0] ^ 1]) + bytes(inner[1:])}
    if kind == "SS":
        return {kind: [inner[0][:-1] + chr(ord(inner[0][-1]) ^ 1), *inner[1:]]}
    if kind == "M":
        first = sorted(inner)[0]
        return {kind: {**inner, first: _flipped(inner[first])}}
    return None


def test_a_proof_cannot_be_made_from_a_table_that_no_longer_matches_the_digest(recorded):
    """Each attribute of the stored version 2 changed by one bit (its value, then its name); then the insider
    who also recomputes every later hash. The proof is refused each time, naming why, and the untouched table
    proves again."""
    taken = json.loads(json.dumps(digests.digest(recorded, [ENTITY, "doc#8"])))
    assert proofs.prove(recorded, ENTITY, 2, taken)["version"] == 2
    table = recorded.history_table
    original = recorded.dynamodb.get_item(TableName=table, Key=_key(2), ConsistentRead=True)["Item"]
    tried = []
    for name, value in sorted(original.items()):
        if name in proofs.LEFT_OUT:
            continue
        renamed = {k: v for k, v in original.items() if k != name}
        renamed[name[:-1] + chr(ord(name[-1]) ^ 1)] = value
        for changed in ({**original, name: _flipped(value)} if _flipped(value) else None, renamed):
            if changed is None:
                continue
            recorded.dynamodb.put_item(TableName=table, Item=changed)
            with pytest.raises(proofs.ProofRejected, match="the table no longer matches the digest"):
                proofs.prove(recorded, ENTITY, 2, taken)
            tried.append(name)
    recorded.dynamodb.put_item(TableName=table, Item=original)
    assert proofs.prove(recorded, ENTITY, 2, taken)["version"] == 2
    assert {model.ACTOR, model.CHANGE_ID, model.RECORDED_AT, model.EXECUTION, "n", "meta", model.CHAIN_HASH,
            model.VERSION} <= set(tried)
    # format 2 stores no prevHash outside a retention window: the proof takes version 1's hash, so a bit of
    # that changed is refused too
    first = recorded.dynamodb.get_item(TableName=table, Key=_key(1), ConsistentRead=True)["Item"]
    assert model.PREV_HASH not in original
    recorded.dynamodb.put_item(TableName=table, Item={**first, model.CHAIN_HASH: _flipped(first[model.CHAIN_HASH])})
    with pytest.raises(proofs.ProofRejected, match="^ChainBroken: the table no longer matches the digest: version 2"):
        proofs.prove(recorded, ENTITY, 2, taken)
    recorded.dynamodb.put_item(TableName=table, Item=first)

    recorded.dynamodb.update_item(TableName=table, Key=_key(2), UpdateExpression="SET title = :t",
                                  ExpressionAttributeValues={":t": {"S": "rewritten"}})
    recompute_chain_from(recorded, 2)
    with pytest.raises(proofs.ProofRejected, match="^HeadMismatch: the table no longer matches the digest: "
                                                  "version 4's hash is not the one the digest recorded"):
        proofs.prove(recorded, ENTITY, 2, taken)
    with pytest.raises(proofs.ProofRejected, match="^VersionGone"):
        recorded.dynamodb.delete_item(TableName=table, Key=_key(3))
        proofs.prove(recorded, ENTITY, 2, taken)


def _key(version: int) -> dict:
    return {model.PK: {"S": ENTITY}, model.SK: {"S": model.history_sk(version)}}


def test_a_redacted_version_is_proven_without_its_content(cf):
    """GIVEN a version holding data that had to be erased (changeflow redact), a digest taken after the
    redaction proves it: its content's hash stands in, and the proof holds none of the content. Against a
    digest taken before the redaction the version's content is gone from the table: refused by name."""
    from test_redact import ENTITY as CUSTOMER
    from test_redact import put as customer_put
    from test_redact import redact

    cf.submit(customer_put(T0, "c1", name="Ana"))
    cf.submit(customer_put(T0 + 1, "c2", name="Ana", ssn="123-45-6789"))
    cf.submit(customer_put(T0 + 2, "c3", name="Ana"))
    before = json.loads(json.dumps(digests.digest(cf, [CUSTOMER])))
    assert cf.submit(redact(2)).status == "SUCCEEDED"
    after = json.loads(json.dumps(digests.digest(cf, [CUSTOMER])))
    proof = proofs.prove(cf, CUSTOMER, 2, after)
    assert "123-45-6789" not in proofs.dumps(proof) and model.REDACTED in proof["item"]
    assert proofs.verify_proof(proofs.loads(proofs.dumps(proof)), digests.parse_digest(after))["head"] == 4
    with pytest.raises(proofs.ProofRejected,
                       match=r"^RedactedAfterDigest: version 2 of 'customer#9' holds no content \(redacted after"):
        proofs.prove(cf, CUSTOMER, 2, before)
    assert proofs.prove(cf, CUSTOMER, 3, before)["version"] == 3  # the versions it did not touch still prove
