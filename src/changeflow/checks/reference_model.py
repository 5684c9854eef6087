"""Campaign 5, model-based: the workflow against a reference model. ``Model`` is the semantics in a few
lines (what the table must hold after changes applied one at a time), written apart from the code under
test; ``change_sequences`` draws sequences of changes, redeliveries and faults (Hypothesis), and
``model_case`` runs one on the embedded stack and compares the table with the model throughout."""

from __future__ import annotations

from typing import Any

from changeflow_core import asof
from changeflow_core.errors import NotFound
from changeflow_core.model import RECENT_CHANGE_IDS

from ..client import Changeflow
from .faults import Injector
from .reliability import STEPS, T0, Tally, apply_patch, check


class Model:
    """The semantics in a few lines: what the table must hold after changes applied one at a time."""

    def __init__(self):
        self.latest: dict[str, Any] | None = None
        self.versions: list[dict[str, Any]] = []

    def apply(self, request: dict[str, Any]) -> tuple[str, str]:
        """``(status, outcome or error)`` of one change, and its effect on the model."""
        content = request.get("attributes")
        if request["operation"] == "rollback":
            k = request["toVersion"]
            if k > len(self.versions) or self.versions[k - 1]["deleted"]:
                return "FAILED", "NotFound"
            content = self.versions[k - 1]["attributes"]
        latest = self.latest
        if latest and request["changeId"] in latest["changeIds"]:
            return "SUCCEEDED", "duplicate"
        if latest and request["effectiveAt"] < latest["effectiveAt"]:
            return "SUCCEEDED", "stale"
        if request["operation"] == "patch":  # of the latest version; nothing live to patch: NotFound
            if latest is None or latest["deleted"]:
                return "FAILED", "NotFound"
            content = apply_patch(latest["attributes"], request.get("set", {}), request.get("remove", []))
        version = len(self.versions) + 1
        deleted = request["operation"] == "delete"
        remembered = {**(latest["changeIds"] if latest else {}), request["changeId"]: version}
        self.latest = {
            "version": version, "effectiveAt": request["effectiveAt"], "changeId": request["changeId"],
            "deleted": deleted, "attributes": {} if deleted else dict(content),
            # the ids of the last RECENT_CHANGE_IDS changes applied, whatever their effectiveAt
            "changeIds": dict(sorted(remembered.items(), key=lambda kv: kv[1])[-RECENT_CHANGE_IDS:]),
        }
        self.versions.append({k: v for k, v in self.latest.items() if k != "changeIds"})
        return "SUCCEEDED", "applied"

    def as_of(self, instant: int | None = None, known: int | None = None) -> dict[str, Any] | None:
        """The version in effect at effective time ``instant`` (any time, if None) among the first ``known``
        versions recorded (all, if None): the last one whose effectiveAt is at or before it (equal times:
        the later applied); None when none was."""
        recorded = self.versions if known is None else self.versions[:known]
        in_effect = [v for v in recorded if instant is None or v["effectiveAt"] <= instant]
        return in_effect[-1] if in_effect else None

    def during(self, start: int, end: int) -> list[int]:
        """The numbers of the versions in effect during ``[start, end]``, oldest first: the one in effect at
        ``start`` and every one that became effective within it."""
        at_start = self.as_of(start)
        return sorted({v["version"] for v in self.versions if start <= v["effectiveAt"] <= end}
                      | ({at_start["version"]} if at_start else set()))

    def instants(self) -> list[int]:
        """Every effective time that matters: each version's, and 1 ms either side."""
        return sorted({v["effectiveAt"] + d for v in self.versions for d in (-1, 0, 1)})


RECOVERABLE_FAULTS = [(step, kind) for step in STEPS for kind in ("before", "lost", "timeout", "service")]


def model_case(stack, cf: Changeflow, entity: str, steps: list[tuple[dict, tuple[str, str] | None]],
               tally: Tally) -> None:
    """Run ``steps`` (a change and an optional fault) one at a time; compare with the model throughout."""
    model = Model()
    submitted = []
    for request, fault in steps:
        injector = Injector()
        rules = [(fault[0], fault[1], 1)] if fault else []
        with injector.around(stack.lambdas, rules):
            execution = cf.submit(request)
        tally.faults.update(injector.injected)
        submitted.append((request, execution))
        status, expected = model.apply(request)
        got = (execution.output or {}).get("outcome") if execution.status == "SUCCEEDED" else execution.error
        # a lost write response included: the execution that wrote the version says applied (issue 26.2)
        if execution.status != status or got != expected:
            tally.violations.append(f"model [{entity}]: {request} gave {execution.status} {got}, model {status} {expected}")
    tally.cases += 1
    check(cf, entity, submitted, tally)
    state = cf.entity(entity)
    keep = ("version", "effectiveAt", "changeId", "deleted", "attributes")
    table_versions = [{k: v[k] for k in keep} for v in state["versions"]]
    if table_versions != model.versions:
        tally.violations.append(f"model [{entity}]: history {table_versions} != model {model.versions}")
    latest = state["latest"]
    if (latest and {k: latest[k] for k in keep}) != (model.latest and {k: model.latest[k] for k in keep}):
        tally.violations.append(f"model [{entity}]: v0 {latest} != model {model.latest}")
    tally.violations.extend(as_of_violations(cf, entity, model))


def as_of_violations(cf: Changeflow, entity: str, model: Model) -> list[str]:
    """Every as-of answer (the read the API and the CLI make) at every effective time that matters, against
    the model: the version in effect with its content, a deletion named by its version, or nothing yet."""
    found = []
    for instant in model.instants():
        expected = model.as_of(instant)
        try:
            view, _ = asof.version_at(cf.dynamodb, cf.table, cf.history_table, entity, as_of=instant)
            got = (view["version"], view["attributes"])
        except NotFound as exc:
            got = ("deleted", str(exc)) if "is a deletion" in str(exc) else ("none", str(exc))
        except asof.Gone as exc:
            got = ("gone", str(exc))
        if expected is None:
            ok = got[0] == "none"
        elif expected["deleted"]:
            ok = got[0] == "deleted" and f"version {expected['version']} is a deletion" in got[1]
        else:
            ok = got == (expected["version"], expected["attributes"])
        if not ok:
            found.append(f"model [{entity}]: as of {instant} answered {got}, model {expected}")
    return found


def change_sequences():
    """Hypothesis strategy: up to 10 changes to one entity (puts, patches, deletes, rollbacks) with
    timestamps from a small range (so ties and stale writes are common), redeliveries of earlier changes,
    and faults."""
    from hypothesis import strategies as st

    fields = st.sampled_from(["v", "a", "b"])
    patch = st.builds(
        lambda at, set_, remove: {"operation": "patch", "effectiveAt": T0 + at,
                                  **({"set": set_} if set_ else {}),
                                  **({"remove": sorted(set(remove) - set(set_))} if set(remove) - set(set_) else {})},
        st.integers(0, 5), st.dictionaries(fields, st.integers(0, 3), max_size=2), st.lists(fields, max_size=2),
    ).filter(lambda request: "set" in request or "remove" in request)
    operation = st.one_of(
        st.builds(lambda at, v: {"operation": "put", "effectiveAt": T0 + at, "attributes": {"v": v}},
                  st.integers(0, 5), st.integers(0, 3)),
        patch,
        st.builds(lambda at: {"operation": "delete", "effectiveAt": T0 + at}, st.integers(0, 5)),
        st.builds(lambda at, k: {"operation": "rollback", "effectiveAt": T0 + at, "toVersion": k},
                  st.integers(0, 5), st.integers(1, 4)),
    )
    step = st.tuples(
        st.one_of(operation, st.integers(0, 9)),  # an int: deliver an earlier change again
        st.one_of(st.none(), st.none(), st.sampled_from(RECOVERABLE_FAULTS)),
    )
    return st.lists(step, min_size=1, max_size=10)


def materialise(entity: str, raw: list) -> list[tuple[dict, tuple[str, str] | None]]:
    """Turn a drawn sequence into requests: fresh change ids, redeliveries copied from earlier requests."""
    steps, made = [], []
    for i, (op, fault) in enumerate(raw):
        if isinstance(op, int):
            if not made:
                continue
            request = made[op % len(made)]
        else:
            request = {"entityId": entity, "changeId": f"{entity}-c{i}", **op}
            made.append(request)
        steps.append((request, fault))
    return steps
