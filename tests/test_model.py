"""Model-based testing (hypothesis): random sequences of put/patch/delete/rollback with random timestamps,
redeliveries and injected faults run through the embedded workflow and through the reference model in
changeflow.checks.reference_model; after every sequence the table must equal the model and the invariants
hold.
The default budget keeps CI fast; CHANGEFLOW_LONG=1 runs 200 sequences."""

from __future__ import annotations

import itertools
import os

import pytest
from hypothesis import HealthCheck, given, settings

from changeflow.checks import reference_model, reliability
from changeflow.client import Changeflow
from changeflow.local.embedded import EmbeddedStack
from conftest import ROOT

EXAMPLES = 200 if os.environ.get("CHANGEFLOW_LONG") == "1" else 15
_entities = itertools.count()


@pytest.fixture(scope="module")
def shared_stack():
    with EmbeddedStack(ROOT, time_scale=0.0005) as stack:
        yield stack


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=reference_model.change_sequences())
def test_workflow_matches_the_reference_model(shared_stack, raw):
    cf = Changeflow.for_embedded(shared_stack)
    entity = f"model-{next(_entities)}"
    tally = reliability.Tally("model")
    reference_model.model_case(shared_stack, cf, entity, reference_model.materialise(entity, raw), tally)
    assert tally.violations == [], "\n".join(tally.violations)


def test_the_model_itself_follows_the_rules():
    model = reference_model.Model()
    put = lambda at, cid, v: {"operation": "put", "effectiveAt": at, "changeId": cid, "attributes": {"v": v}}  # noqa: E731
    assert model.apply(put(5, "a", 1)) == ("SUCCEEDED", "applied")
    assert model.apply(put(4, "b", 2)) == ("SUCCEEDED", "stale")
    assert model.apply(put(5, "c", 3)) == ("SUCCEEDED", "applied")  # equal times accepted
    assert model.apply(put(5, "a", 1)) == ("SUCCEEDED", "duplicate")
    assert model.apply(put(9, "a", 1)) == ("SUCCEEDED", "duplicate")  # reused with a newer effectiveAt
    assert model.apply({"operation": "delete", "effectiveAt": 6, "changeId": "d"}) == ("SUCCEEDED", "applied")
    assert model.apply({"operation": "rollback", "effectiveAt": 7, "changeId": "r", "toVersion": 3}) == ("FAILED", "NotFound")
    assert model.apply({"operation": "rollback", "effectiveAt": 7, "changeId": "r", "toVersion": 1}) == ("SUCCEEDED", "applied")
    assert [v["attributes"] for v in model.versions] == [{"v": 1}, {"v": 3}, {}, {"v": 1}]


def test_the_model_patches_the_latest_version_and_nothing_else():
    model = reference_model.Model()
    patch = lambda at, cid, **kw: {"operation": "patch", "effectiveAt": at, "changeId": cid, **kw}  # noqa: E731
    assert model.apply(patch(1, "p0", set={"a": 1})) == ("FAILED", "NotFound")  # nothing to patch
    model.apply({"operation": "put", "effectiveAt": 5, "changeId": "a", "attributes": {"v": 1, "a": 0}})
    assert model.apply(patch(4, "p1", set={"a": 9})) == ("SUCCEEDED", "stale")
    assert model.apply(patch(6, "p2", set={"b": 2}, remove=["v"])) == ("SUCCEEDED", "applied")
    assert model.apply(patch(7, "p2", set={"b": 3})) == ("SUCCEEDED", "duplicate")
    assert model.versions[-1]["attributes"] == {"a": 0, "b": 2}
    model.apply({"operation": "delete", "effectiveAt": 7, "changeId": "d"})
    assert model.apply(patch(6, "p3", set={"a": 1})) == ("SUCCEEDED", "stale")  # older than the delete
    assert model.apply(patch(8, "p4", set={"a": 1})) == ("FAILED", "NotFound")  # of a tombstone
    assert len(model.versions) == 3


def test_the_model_merges_patches_by_field_clock():
    # issue 34: a field keeps its own time; a patch is stale only where a newer change wrote each field
    model = reference_model.Model()
    patch = lambda at, cid, **kw: {"operation": "patch", "effectiveAt": at, "changeId": cid, **kw}  # noqa: E731
    put = lambda at, cid, **kw: {"operation": "put", "effectiveAt": at, "changeId": cid, "attributes": kw}  # noqa: E731
    model.apply(put(10, "base", a=0, b=0))
    assert model.apply(patch(20, "late-a", set={"a": 2})) == ("SUCCEEDED", "applied")
    # received first, written second: older than the latest version (20), but no newer change wrote b
    assert model.apply(patch(15, "early-b", set={"b": 1, "a": 1})) == ("SUCCEEDED", "applied")
    assert model.superseded == ["a"] and model.latest["attributes"] == {"a": 2, "b": 1}
    assert model.latest["effectiveAt"] == 20 and reference_model.Model.field_times(model.latest) == {"b": 15}
    assert model.apply(patch(12, "older", set={"b": 9}, remove=["a"])) == ("SUCCEEDED", "stale")
    assert model.superseded == ["b", "a"]
    # equal times: the greater value stays, in either order; a removal never wins
    assert model.apply(patch(15, "tie-lower", set={"b": 0})) == ("SUCCEEDED", "stale")
    assert model.apply(patch(15, "tie-greater", set={"b": 3})) == ("SUCCEEDED", "applied")
    assert model.apply(patch(20, "tie-remove", remove=["a"], set={"d": 1})) == ("SUCCEEDED", "applied")
    assert model.superseded == ["a"] and model.latest["attributes"] == {"a": 2, "b": 3, "d": 1}
    # a put is the whole document at its time: older than the latest version is stale, else every field's
    assert model.apply(put(19, "old-put")) == ("SUCCEEDED", "stale")
    assert model.apply(put(30, "put", z=1)) == ("SUCCEEDED", "applied")
    assert model.apply(patch(25, "before-put", set={"a": 5})) == ("SUCCEEDED", "stale")
    # a field the put lacked is at the put's time too, and any value beats none at that time
    assert model.apply(patch(30, "same-time", set={"y": 0})) == ("SUCCEEDED", "applied")
    assert model.latest["attributes"] == {"z": 1, "y": 0}
