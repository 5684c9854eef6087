"""Campaign 5, model-based: the workflow against a reference model. ``Model`` is the semantics in a few
lines (what the table must hold after changes applied one at a time), written apart from the code under
test; ``change_sequences`` draws sequences of changes, redeliveries and faults (Hypothesis), and
``model_case`` runs one on the embedded stack and compares the table with the model throughout."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeSerializer

from changeflow_core import asof
from changeflow_core.chain import encode_value
from changeflow_core.errors import NotFound
from changeflow_core.model import RECENT_CHANGE_IDS

from ..client import Changeflow
from .faults import Injector
from .reliability import STEPS, T0, Tally, apply_patch, check


def tie_rank(value: Any = None, present: bool = True) -> tuple:
    """Equal times (issue 34): the greater value stays. No value is below every value; then numbers by
    value, strings by their UTF-8 bytes, anything else by the chain's canonical encoding (docs/api.md)."""
    if not present:
        return (0,)
    if isinstance(value, (int, Decimal)) and not isinstance(value, bool):
        return (1, Decimal(value))
    if isinstance(value, str):
        return (2, value.encode("utf-8"))
    return (3, encode_value(TypeSerializer().serialize(value)))


class Model:
    """The semantics in a few lines: what the table must hold after changes applied one at a time.

    Field clocks (issue 34): each field has an effective time; a put, a rollback and a delete give every
    field (those it lacks too) their time, a patch each field it applies. A patch applies the fields whose
    time is older than its own (equal times: the greater value stays, any value over none, a removal never
    wins), is stale when it applies none, and otherwise names the others ``superseded``. A version's
    effectiveAt is the newest of its fields' times."""

    def __init__(self):
        self.latest: dict[str, Any] | None = None
        self.versions: list[dict[str, Any]] = []
        self.superseded: list[str] = []  # what the last change applied reported superseded

    def apply(self, request: dict[str, Any]) -> tuple[str, str]:
        """``(status, outcome or error)`` of one change, and its effect on the model."""
        self.superseded = []
        content = request.get("attributes")
        if request["operation"] == "rollback":
            k = request["toVersion"]
            if k > len(self.versions) or self.versions[k - 1]["deleted"]:
                return "FAILED", "NotFound"
            content = self.versions[k - 1]["attributes"]
        latest, at = self.latest, request["effectiveAt"]
        if latest and request["changeId"] in latest["changeIds"]:  # it reports what it superseded then
            self.superseded = list(self.versions[latest["changeIds"][request["changeId"]] - 1]["superseded"])
            return "SUCCEEDED", "duplicate"
        base, times = at, {}  # the new version's clocks: every field at its time (a whole document)
        if request["operation"] == "patch":  # field by field, against the latest version
            if latest:
                self.superseded = self._superseded(request)
                if len(self.superseded) == len(request.get("set", {})) + len(request.get("remove", [])):
                    return "SUCCEEDED", "stale"
            if latest is None or latest["deleted"]:  # nothing live to patch
                self.superseded = []
                return "FAILED", "NotFound"
            lost = set(self.superseded)
            content = apply_patch(latest["attributes"],
                                  {k: v for k, v in request.get("set", {}).items() if k not in lost},
                                  [name for name in request.get("remove", []) if name not in lost])
            base = latest["base"]
            times = {**latest["times"], **{name: at for name in [*request.get("set", {}), *request.get("remove", [])]
                                           if name not in lost}}
            at = max(at, latest["effectiveAt"])
        elif latest and at < latest["effectiveAt"]:  # a whole document older than the latest
            return "SUCCEEDED", "stale"
        version = len(self.versions) + 1
        deleted = request["operation"] == "delete"
        remembered = {**(latest["changeIds"] if latest else {}), request["changeId"]: version}
        self.latest = {
            "version": version, "effectiveAt": at, "changeId": request["changeId"],
            "deleted": deleted, "attributes": {} if deleted else dict(content),
            "base": base, "times": {name: t for name, t in times.items() if t != base},
            "superseded": list(self.superseded),
            # the ids of the last RECENT_CHANGE_IDS changes applied, whatever their effectiveAt
            "changeIds": dict(sorted(remembered.items(), key=lambda kv: kv[1])[-RECENT_CHANGE_IDS:]),
        }
        self.versions.append({k: v for k, v in self.latest.items() if k != "changeIds"})
        return "SUCCEEDED", "applied"

    def _superseded(self, request: dict[str, Any]) -> list[str]:
        latest, at = self.latest, request["effectiveAt"]
        clock = lambda name: latest["times"].get(name, latest["base"])  # noqa: E731
        current = latest["attributes"]
        lost = [name for name, value in request.get("set", {}).items()
                if clock(name) > at or (clock(name) == at and tie_rank(value) <= tie_rank(current.get(name),
                                                                                        name in current))]
        return lost + [name for name in request.get("remove", []) if clock(name) >= at]

    @staticmethod
    def field_times(version: dict[str, Any]) -> dict[str, int]:
        """Each field's time where it is not the version's (``fieldTimes`` in the read API)."""
        clock = lambda name: version["times"].get(name, version["base"])  # noqa: E731
        names = set(version["times"]) | set(version["attributes"])
        return {name: clock(name) for name in sorted(names) if clock(name) != version["effectiveAt"]}

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
        elif status == "SUCCEEDED" and (execution.output or {}).get("superseded") != model.superseded:
            tally.violations.append(f"model [{entity}]: {request} superseded {execution.output.get('superseded')}, "
                                    f"model {model.superseded}")
    tally.cases += 1
    check(cf, entity, submitted, tally)
    tally.violations.extend(table_violations(cf, entity, model))
    tally.violations.extend(as_of_violations(cf, entity, model))


KEPT = ("version", "effectiveAt", "changeId", "deleted", "attributes")


def table_violations(cf: Changeflow, entity: str, model: Model) -> list[str]:
    """The versions and ``v0`` as the read API shows them against the model's: content, times, and each
    field's time (``fieldTimes``)."""
    state, found = cf.entity(entity), []

    def shown(version: dict[str, Any]) -> dict[str, Any]:
        return {**{k: version[k] for k in KEPT}, "fieldTimes": version.get("fieldTimes") or {}}

    def modelled(version: dict[str, Any]) -> dict[str, Any]:
        return {**{k: version[k] for k in KEPT}, "fieldTimes": Model.field_times(version)}

    table_versions = [shown(v) for v in state["versions"]]
    expected = [modelled(v) for v in model.versions]
    if table_versions != expected:
        found.append(f"model [{entity}]: history {table_versions} != model {expected}")
    latest = state["latest"]
    if (latest and shown(latest)) != (model.latest and modelled(model.latest)):
        found.append(f"model [{entity}]: v0 {latest} != model {model.latest}")
    return found


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
