"""The hash chain over versions (changeflow_core.chain): a canonical encoding of DynamoDB's own types
that does not depend on the interface or the Python version, and a chain in which any single change to
a stored version is found and named."""

from __future__ import annotations

import json
import os
import random
import subprocess
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changeflow_core import chain, model

from conftest import ROOT

ENTITY = "doc#42"


def version_item(version: int, **content) -> dict:
    """A history item (wire format) of ``version``, as the write step builds it."""
    item = {
        model.PK: {"S": ENTITY}, model.SK: {"S": model.history_sk(version)},
        model.VERSION: {"N": str(version)}, model.EFFECTIVE_AT: {"N": str(1000 * version)},
        model.CHANGE_ID: {"S": f"c{version}"}, model.OPERATION: {"S": "put"},
        model.ACTOR: {"S": "ana@example.com"}, model.REASON: {"S": "edit"},
        model.RECORDED_AT: {"N": str(1763770000000 + version)},
        model.EXECUTION: {"S": f"arn:aws:states:us-east-1:123456789012:execution:sm:e{version}"},
    }
    item.update({k: v for k, v in chain.to_wire(content).items()})
    return item


SEALS = {  # how each format seals: format 1 (items written before format 2), format 2 with and without prevHash
    "format 1": chain.seal_v1,
    "format 2": chain.seal,
    "format 2 without prevHash": lambda item, prev: chain.seal(item, prev, keep_prev=False),
}


def build_history(contents: list[dict], seal=chain.seal) -> tuple[list[dict], dict]:
    """Sealed history items for each content, and the v0 of the newest."""
    history, prev = [], chain.genesis(ENTITY)
    for n, content in enumerate(contents, start=1):
        sealed = seal(version_item(n, **content), prev)
        history.append(sealed)
        prev = chain.stored_hash(sealed)
    latest = dict(history[-1], **{model.SK: {"S": model.LATEST_SK}})
    return history, latest


# --- the encoding ------------------------------------------------------------------------------------
def test_numbers_are_encoded_as_dynamodb_normalises_them():
    assert chain.canonical_number("1.50") == chain.canonical_number("1.5") == chain.canonical_number("15E-1")
    assert chain.canonical_number("0") == chain.canonical_number("-0.000") == "0"
    assert chain.canonical_number("-1.50") == "-15E-1"
    assert chain.canonical_number("1E+2") == chain.canonical_number("100") != chain.canonical_number("10")
    big = "9.9999999999999999999999999999999999999E+125"
    assert chain.canonical_number(big) == "99999999999999999999999999999999999999E88"


def test_the_encoding_is_the_same_for_the_client_and_the_resource_forms():
    resource = {"pk": ENTITY, "n": Decimal("1.50"), "tags": {"b", "a"}, "m": {"z": [1, "x", None, True]},
                "blob": b"\x00\xff", "ns": {Decimal(2), Decimal("1.0")}}
    client = {"pk": {"S": ENTITY}, "n": {"N": "1.5"}, "tags": {"SS": ["a", "b"]},
              "m": {"M": {"z": {"L": [{"N": "1"}, {"S": "x"}, {"NULL": True}, {"BOOL": True}]}}},
              "blob": {"B": b"\x00\xff"}, "ns": {"NS": ["1", "2"]}}
    assert chain.encode_version(chain.to_wire(resource)) == chain.encode_version(client)


def test_different_values_never_share_an_encoding():
    values = [{"S": "1"}, {"N": "1"}, {"S": ""}, {"NULL": True}, {"BOOL": False}, {"L": []}, {"M": {}},
              {"SS": ["a", "b"]}, {"L": [{"S": "a"}, {"S": "b"}]}, {"S": "ab"}, {"M": {"a": {"S": "b"}}},
              {"M": {"ab": {"S": ""}}}, {"B": b"1"}, {"N": "10"}, {"N": "1E+1"}]
    encodings = [chain.encode_value(v) for v in values]
    # 10 and 1E+1 are the same number to DynamoDB: the one pair that must share an encoding
    assert len(set(encodings)) == len(values) - 1


GOLDEN = {"pk": {"S": "doc#42"}, "sk": {"S": "v0"}, "version": {"N": "2"}, "title": {"S": "ünïcode ✓"},
          "n": {"N": "0.12345678901234567890123456789012345678"}, "set": {"SS": ["b", "a"]},
          "m": {"M": {"b": {"L": [{"N": "-1.50"}, {"BOOL": True}, {"NULL": True}]}, "a": {"S": ""}}}}


def test_a_fixed_version_has_a_fixed_hash_on_every_python():
    """The golden value below is the chain's format: it must never change (stored hashes depend on it).
    The same computation runs on python3.13 (Lambda's runtime) where this machine has it."""
    got = chain.link_v1(chain.genesis("doc#42"), GOLDEN)
    assert got == "926d7e367eab87784137a75287c26e237792a1586ed67c4ecaeea1bcdefb36a5"
    python313 = _python313()
    if python313 is None:
        pytest.skip("no python3.13 with boto3 here (make diff-asl or the Lambda runtime venv provides one)")
    code = ("import json,sys; from changeflow_core import chain; g=json.loads(sys.argv[1]); "
            "print(chain.link_v1(chain.genesis('doc#42'), g), chain.link_v2(chain.genesis('doc#42'), g))")
    out = subprocess.run([python313, "-c", code, json.dumps(GOLDEN)], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "layers" / "core")})
    assert out.stdout.split() == [got, chain.link_v2(chain.genesis("doc#42"), GOLDEN)]



def _python313() -> str | None:
    for candidate in (ROOT / ".venv-asl" / "bin" / "python", ROOT / ".venv-lambda" / "bin" / "python"):
        if candidate.exists():
            version = subprocess.run([str(candidate), "-c", "import sys, boto3; print(sys.version_info[:2])"],
                                     capture_output=True, text=True)
            if version.returncode == 0 and "(3, 13)" in version.stdout:
                return str(candidate)
    return None


# --- the chain ---------------------------------------------------------------------------------------
def test_an_untouched_history_verifies_from_genesis_to_v0():
    history, latest = build_history([{"title": "a"}, {"title": "b"}, {"title": "c"}])
    assert chain.verify_chain(ENTITY, history, latest) == ([], 3)


def test_the_chain_is_bound_to_its_entity():
    history, latest = build_history([{"title": "a"}])
    problems, _ = chain.verify_chain("doc#43", history, latest)
    assert problems and problems[0].startswith("version 1:")


def test_with_a_retention_window_the_oldest_kept_version_anchors_the_chain():
    history, latest = build_history([{"title": t} for t in "abcde"])
    assert chain.verify_chain(ENTITY, history[2:], latest, anchored=True) == ([], 3)
    problems, _ = chain.verify_chain(ENTITY, history[2:], latest, anchored=False)
    assert problems == ["version 3: follows version 0; versions 1..2 are missing from the chain"]
    problems, _ = chain.verify_chain(ENTITY, history[1:], latest, anchored=False)
    assert problems == ["version 2: follows version 0; version 1 is missing from the chain"]


def _mutations(history: list[dict], latest: dict, rng: random.Random):
    """Every way an insider with table access could alter what was recorded, one at a time:
    (description, the version that must be named, mutated history, mutated v0)."""
    n = len(history)
    target = rng.randrange(n)
    version = target + 1

    def copy():
        return [dict(h) for h in history], dict(latest)

    h, v0 = copy()
    h[target]["title"] = {"S": "forged"}
    yield "an attribute changed", f"version {version}:", h, v0
    for field in (model.ACTOR, model.EFFECTIVE_AT, model.EXECUTION, model.RECORDED_AT, model.OPERATION):
        h, v0 = copy()
        h[target][field] = {"S": "x"} if field in (model.ACTOR, model.EXECUTION, model.OPERATION) else {"N": "7"}
        yield f"{field} changed", f"version {version}:", h, v0
    h, v0 = copy()
    h[target][model.DELETED] = {"BOOL": True}
    yield "marked deleted", f"version {version}:", h, v0
    if n > 2:
        # (the newest history item missing is v0's version without its history put: the state a failed
        # history put leaves, which verify reports and repair restores from v0; not a chain matter)
        i = rng.randrange(n - 1)
        h, v0 = copy()
        del h[i]
        yield "a version deleted", f"version {i + 2}:", h, v0
    if n > 1:
        i = rng.randrange(n - 1)
        h, v0 = copy()
        h[i], h[i + 1] = dict(h[i + 1]), dict(h[i])
        h[i][model.VERSION], h[i + 1][model.VERSION] = h[i + 1][model.VERSION], h[i][model.VERSION]
        yield "two versions swapped", f"version {i + 1}:", h, v0
    h, v0 = copy()
    v0["title"] = {"S": "rewritten"}
    yield "v0 rewritten", f"v0 (version {n})", h, v0
    h, v0 = copy()
    forged = dict(h[-1], **{model.VERSION: {"N": str(n + 1)}, model.SK: {"S": model.history_sk(n + 1)},
                            "title": {"S": "appended"}})
    h.append(forged)
    yield "a forged version appended", f"version {n + 1}:", h, v0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(titles=st.lists(st.text(max_size=8), min_size=1, max_size=8), seed=st.integers(0, 2**32),
       form=st.sampled_from(sorted(SEALS)))
def test_any_single_mutation_of_a_random_history_is_found_and_the_version_named(titles, seed, form):
    history, latest = build_history([{"title": t} for t in titles], SEALS[form])
    assert chain.verify_chain(ENTITY, history, latest)[0] == []
    for what, named, mutated, v0 in _mutations(history, latest, random.Random(seed)):
        problems, _ = chain.verify_chain(ENTITY, mutated, v0)
        assert problems, what
        assert problems[0].startswith(named), (what, problems)


def test_the_merkle_root_changes_with_any_head_and_not_with_their_order():
    heads = [{"entityId": f"e{i}", "version": i, "chainHash": chain.genesis(f"e{i}")} for i in range(1, 6)]
    root = chain.merkle_root(heads)
    assert chain.merkle_root(list(reversed(heads))) == root
    for i in range(len(heads)):
        changed = [dict(h) for h in heads]
        changed[i]["version"] += 1
        assert chain.merkle_root(changed) != root
    assert chain.merkle_root(heads[:-1]) != root


# --- format 2: the footprint, old items, redaction and adoption (issues 22.6, 27.5, 27.3) ---------------
GOLDEN_V2 = "2f109319716742ff37fe20d1a31b7a9f99943abe41a4a216a4a125bd5abb0087"


def test_format_2_has_a_fixed_hash_of_its_own():
    """Format 2's golden value: metadata whole, the content through its hash. It must never change."""
    assert chain.link_v2(chain.genesis("doc#42"), GOLDEN) == GOLDEN_V2
    assert chain.link_v2(chain.genesis("doc#42"), GOLDEN) != chain.link_v1(chain.genesis("doc#42"), GOLDEN)


def chain_bytes(item: dict) -> int:
    from changeflow_core import codec

    return codec.item_size(item) - codec.item_size({k: v for k, v in item.items()
                                                    if k not in (model.PREV_HASH, model.CHAIN_HASH)})


def test_format_2_weighs_41_bytes_an_item_and_81_with_the_retention_windows_anchor():
    item = version_item(1, title="a")
    assert chain_bytes(chain.seal_v1(item, chain.genesis(ENTITY))) == 145  # what format 1 costs
    assert chain_bytes(chain.seal(item, chain.genesis(ENTITY), keep_prev=False)) == 41
    assert chain_bytes(chain.seal(item, chain.genesis(ENTITY))) == 81


@pytest.mark.parametrize("form", sorted(SEALS))
def test_each_format_verifies_and_a_history_that_changed_format_midway_too(form):
    history, latest = build_history([{"title": t} for t in "abc"], SEALS[form])
    assert chain.verify_chain(ENTITY, history, latest) == ([], 3)
    # an upgrade: versions 1..2 in format 1, then format 2 chained from version 2's (hex) hash
    old, _ = build_history([{"title": t} for t in "ab"], chain.seal_v1)
    third = SEALS[form](version_item(3, title="c"), chain.stored_hash(old[-1]))
    assert chain.verify_chain(ENTITY, old + [third], dict(third, sk={"S": "v0"})) == ([], 3)


def test_a_downgrade_to_format_1_breaks_the_link():
    """Rewriting a format-2 item's hash as a hex string (format 1) makes it a format-1 item: recomputed
    with the content inside, it no longer matches."""
    history, latest = build_history([{"title": t} for t in "abc"])
    history[1] = dict(history[1], chainHash={"S": chain.stored_hash(history[1])},
                      prevHash={"S": chain.stored_prev(history[1])})
    problems, _ = chain.verify_chain(ENTITY, history, latest)
    assert problems and problems[0].startswith("version 2:")


def test_without_prev_hash_the_oldest_kept_version_is_noted_not_anchored():
    history, latest = build_history([{"title": t} for t in "abcde"], SEALS["format 2 without prevHash"])
    audit = chain.audit_chain(ENTITY, history[2:], latest, anchored=True)
    assert audit.problems == [] and audit.notes[0].startswith("version 3: the oldest version kept")
    history[3]["title"] = {"S": "altered"}  # the versions after it are still recomputed
    assert chain.verify_chain(ENTITY, history[2:], latest, anchored=True)[0][0].startswith("version 4:")


def redact(history: list[dict], n: int, seal=chain.seal, **edits) -> tuple[list[dict], dict]:
    """What the workflow does: version m (the next) records version n's hashes and carries the content of
    the version before it (none if that is n); item n is replaced by its redacted form."""
    m = len(history) + 1
    record = chain.redaction_record(history[n - 1])
    before = history[-1]
    content = {} if n == m - 1 else {k: v for k, v in before.items() if chain.is_content(k)}
    item = version_item(m)
    item.update(content)
    item[model.OPERATION] = {"S": "redact"}
    item[model.REASON] = {"S": "erasure request"}
    item[model.REDACTION] = {"M": {"version": {"N": str(n)},
                                   "contentHash": {"B": bytes.fromhex(record["contentHash"])},
                                   "itemHash": {"B": bytes.fromhex(record["itemHash"])}}}
    item.update(edits)
    sealed = seal(item, chain.stored_hash(before))
    redacted = [dict(h) for h in history]
    redacted[n - 1] = chain.redacted_form(history[n - 1])
    redacted.append(sealed)
    return redacted, dict(sealed, sk={"S": "v0"})


@pytest.mark.parametrize("form", ["format 1", "format 2", "format 2 without prevHash"])
def test_a_redacted_version_keeps_the_chain_and_verify_says_who_redacted_it(form):
    history, _ = build_history([{"title": t, "ssn": f"123-{t}"} for t in "abc"], SEALS[form])
    redacted, latest = redact(history, 2)
    assert model.REDACTED in redacted[1] and "ssn" not in redacted[1] and "title" not in redacted[1]
    audit = chain.audit_chain(ENTITY, redacted, latest)
    assert audit.problems == []
    assert "version 2 redacted at version 4 by ana@example.com (claimed; no principal recorded): erasure request" in audit.notes
    # the newest version redacted: the redact version holds no content
    again, latest = redact(history, 3)
    assert chain.audit_chain(ENTITY, again, latest).problems == []
    assert chain.content_names(latest) == []


def test_content_removed_without_a_redaction_version_is_caught():
    history, latest = build_history([{"title": t} for t in "abc"])
    history[1] = chain.redacted_form(history[1])  # the insider's "redaction": the link even still holds
    problems, _ = chain.verify_chain(ENTITY, history, latest)
    assert problems == ["version 2: its content was removed without a redaction version"]


def test_a_redaction_version_that_names_a_version_it_did_not_redact_is_caught():
    history, _ = build_history([{"title": t} for t in "abc"])
    redacted, latest = redact(history, 2)
    # the insider removes version 1's content and points the record at it: m's link no longer holds
    forged = [dict(h) for h in redacted]
    forged[0] = chain.redacted_form(history[0])
    forged[3] = dict(forged[3], **{model.REDACTION: {"M": {**forged[3][model.REDACTION]["M"], "version": {"N": "1"}}}})
    problems, _ = chain.verify_chain(ENTITY, forged, dict(forged[3], sk={"S": "v0"}))
    assert problems and problems[0].startswith("version 4:")
    # a redaction version, correctly sealed, naming version 1 while version 2 lost its content
    wrong, latest = redact(history, 1)
    wrong[0], wrong[1] = history[0], chain.redacted_form(history[1])
    problems, _ = chain.verify_chain(ENTITY, wrong, latest)
    assert "version 1: holds content that version 4 redacted (the redaction did not finish: `changeflow repair` " \
           "finishes it; or the content was restored)" in problems
    assert "version 2: its content was removed without a redaction version" in problems


@pytest.mark.parametrize("form", ["format 1", "format 2"])
def test_redact_then_restore_is_caught(form):
    history, _ = build_history([{"title": t} for t in "abc"], SEALS[form])
    redacted, latest = redact(history, 2)
    restored = [dict(h) for h in redacted]
    restored[1] = history[1]  # the original item put back
    problems, _ = chain.verify_chain(ENTITY, restored, latest)
    assert problems and problems[0].startswith("version 2: holds content that version 4 redacted")
    partly = [dict(h) for h in redacted]
    partly[1] = dict(partly[1], title={"S": "b"})  # content back beside the kept hash
    problems, _ = chain.verify_chain(ENTITY, partly, latest)
    assert problems and problems[0].startswith("version 2:")
    altered = [dict(h) for h in redacted]
    altered[1] = dict(altered[1], actor={"S": "mallory@example.com"})  # what remains of it changed
    problems, _ = chain.verify_chain(ENTITY, altered, latest)
    assert problems and problems[0].startswith("version 2:")


def legacy_history(contents: list[dict]) -> list[dict]:
    return [version_item(n, **content) for n, content in enumerate(contents, start=1)]


def adopt(entity_history: list[dict], legacy_count: int) -> tuple[list[dict], dict]:
    m = len(entity_history) + 1
    item = version_item(m, **{k: chain.to_wire({})[k] for k in ()})
    item[model.OPERATION] = {"S": "adopt"}
    item[model.ADOPTION] = {"M": {"versions": {"N": str(legacy_count)}, "chainHash": {"B": bytes.fromhex(
        chain.adoption_hash(ENTITY, entity_history[:legacy_count]))}}}
    prev = chain.stored_hash(entity_history[-1]) or chain.genesis(ENTITY)
    sealed = chain.seal(item, prev)
    return entity_history + [sealed], dict(sealed, sk={"S": "v0"})


def test_legacy_versions_are_a_problem_until_adopted_and_then_verified_for_good():
    legacy = legacy_history([{"title": t} for t in "abc"])
    problems, _ = chain.verify_chain(ENTITY, legacy, dict(legacy[-1], sk={"S": "v0"}))
    assert problems == ["versions 1..3: no chain hash (written before the chain, or chain attributes removed); "
                        "`changeflow adopt` binds versions written before the chain, once"]
    adopted, latest = adopt(legacy, 3)
    audit = chain.audit_chain(ENTITY, adopted, latest)
    assert audit.problems == [] and "versions 1..3 (written before the chain) adopted at version 4" in audit.notes
    later = chain.seal(version_item(5, title="d"), chain.stored_hash(adopted[-1]))
    adopted.append(later)
    latest = dict(later, sk={"S": "v0"})
    assert chain.verify_chain(ENTITY, adopted, latest) == ([], 2)
    # after the adoption: a legacy version altered, the chain stripped from a later one, the adopt version's own
    changed = [dict(h) for h in adopted]
    changed[1]["title"] = {"S": "altered"}
    assert chain.verify_chain(ENTITY, changed, latest)[0][0].startswith("version 1: versions 1..3, adopted at version 4, changed")
    stripped = [dict(h) for h in adopted]
    stripped[4] = {k: v for k, v in stripped[4].items() if k not in (model.PREV_HASH, model.CHAIN_HASH)}
    assert chain.verify_chain(ENTITY, stripped, latest)[0][0].startswith("version 5: has no chain hash")
    everything = [{k: v for k, v in h.items() if k not in (model.PREV_HASH, model.CHAIN_HASH)} for h in adopted]
    assert chain.verify_chain(ENTITY, everything, None)[0][0].startswith("versions 1..5: no chain hash")


def test_an_upgrade_with_traffic_adopts_the_legacy_prefix_before_the_chained_versions():
    """Deployed, then written to before `adopt` ran: versions 1..2 legacy, 3 chained from genesis, 4 adopts."""
    legacy = legacy_history([{"title": "a"}, {"title": "b"}])
    third = chain.seal(version_item(3, title="c"), chain.genesis(ENTITY))
    problems, _ = chain.verify_chain(ENTITY, legacy + [third], dict(third, sk={"S": "v0"}))
    assert problems[0].startswith("versions 1..2: no chain hash")
    adopted, latest = adopt(legacy + [third], 2)
    assert chain.verify_chain(ENTITY, adopted, latest) == ([], 2)
    # an adopt record that claims versions which carry a chain, or fewer than are legacy
    wrong, latest = adopt(legacy + [third], 1)
    assert chain.verify_chain(ENTITY, wrong, latest)[0][0].startswith("version 1: version 4 adopted versions 1..1")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(titles=st.lists(st.text(max_size=6), min_size=2, max_size=7), seed=st.integers(0, 2**32),
       form=st.sampled_from(["format 1", "format 2", "format 2 without prevHash"]))
def test_a_random_redaction_verifies_and_every_attack_on_it_is_found(titles, seed, form):
    rng = random.Random(seed)
    history, _ = build_history([{"title": t, "n": i} for i, t in enumerate(titles)], SEALS[form])
    n = rng.randrange(1, len(history) + 1)
    redacted, latest = redact(history, n, SEALS[form])
    assert chain.verify_chain(ENTITY, redacted, latest)[0] == []
    attacks = {
        "restored": lambda h: h.__setitem__(n - 1, history[n - 1]),
        "metadata altered": lambda h: h.__setitem__(n - 1, dict(h[n - 1], actor={"S": "mallory"})),
        "content put back": lambda h: h.__setitem__(n - 1, dict(h[n - 1], title={"S": "x"})),
    }
    others = [v for v in range(1, len(history) + 1) if v != n]
    if others:
        other = rng.choice(others)
        attacks["another version emptied"] = lambda h: h.__setitem__(other - 1, chain.redacted_form(h[other - 1]))
    for what, attack in attacks.items():
        mutated = [dict(h) for h in redacted]
        attack(mutated)
        problems, _ = chain.verify_chain(ENTITY, mutated, latest)
        assert problems, what
