"""The hash chain over versions (changeflow_core.chain): a canonical encoding of DynamoDB's own types
that does not depend on the interface or the Python version, and a chain in which any single change to
a stored version is found and named."""

from __future__ import annotations

import json
import os
import random
import subprocess
from decimal import Decimal
from pathlib import Path

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


def build_history(contents: list[dict]) -> tuple[list[dict], dict]:
    """Sealed history items for each content, and the v0 of the newest."""
    history, prev = [], chain.genesis(ENTITY)
    for n, content in enumerate(contents, start=1):
        sealed = chain.seal(version_item(n, **content), prev)
        history.append(sealed)
        prev = sealed[chain.CHAIN_HASH]["S"]
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
    got = chain.link(chain.genesis("doc#42"), GOLDEN)
    assert got == "926d7e367eab87784137a75287c26e237792a1586ed67c4ecaeea1bcdefb36a5"
    python313 = _python313()
    if python313 is None:
        pytest.skip("no python3.13 with boto3 here (make diff-asl or the Lambda runtime venv provides one)")
    code = ("import json,sys; from changeflow_core import chain; g=json.loads(sys.argv[1]); "
            "print(chain.link(chain.genesis('doc#42'), g))")
    out = subprocess.run([python313, "-c", code, json.dumps(GOLDEN)], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "layers" / "core")})
    assert out.stdout.strip() == got



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
@given(titles=st.lists(st.text(max_size=8), min_size=1, max_size=8), seed=st.integers(0, 2**32))
def test_any_single_mutation_of_a_random_history_is_found_and_the_version_named(titles, seed):
    history, latest = build_history([{"title": t} for t in titles])
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
