"""The guarantees, as campaigns that run the real workflow on the embedded stack and count what they did:
cases tried, faults injected, executions run, violations found. The tests run them with small budgets
and require zero violations; ``benchmarks/reliability.py`` runs them longer and prints the report.

Invariants checked after every case (``violations``):
- every execution ended ``applied``/``stale``/``duplicate``, or FAILED with one of the workflow's names;
- versions are contiguous from 1, no change wrote two versions, ``v0`` is the highest version;
- each version's content is exactly the change that produced it (a rollback: its source's content; a
  patch: the version before it with the patch applied);
- every change reported applied is in history; a change reported only stale is not;
- ``changeflow verify`` finds nothing wrong.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..audit.repair import repair
from ..audit.verify import verify
from ..client import Changeflow, Execution, named_errors
from ..client.logged import UNKNOWN
from ..local.moto_patches.stepfunctions.clock import Holds
from .faults import THROTTLE_CODES, Injector

# The errors the workflow names, read from the checkout's ASL file.
NAMED_ERRORS = named_errors(json.loads(
    (Path(__file__).resolve().parents[3] / "statemachines" / "change.asl.json").read_text()))
T0 = 1_767_225_600_000


@dataclass
class Tally:
    guarantee: str
    cases: int = 0
    executions: int = 0
    faults: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)

    def add(self, other: "Tally") -> None:
        self.cases += other.cases
        self.executions += other.executions
        self.faults.update(other.faults)
        self.outcomes.update(other.outcomes)
        self.violations.extend(other.violations)

    def row(self) -> list[Any]:
        return [self.guarantee, self.cases, sum(self.faults.values()), self.executions, len(self.violations)]


def put(entity: str, at: int, change: str, **attributes) -> dict[str, Any]:
    return {"entityId": entity, "operation": "put", "attributes": attributes or {"by": change}, "effectiveAt": at,
            "changeId": change}


def check(cf: Changeflow, entity: str, submitted: list[tuple[dict, Execution]], tally: Tally) -> None:
    """Record every invariant the entity and its executions break into ``tally.violations``."""
    tally.executions += len(submitted)
    problems = []
    reported: dict[str, set[str]] = {}
    for request, execution in submitted:
        outcome = (execution.output or {}).get("outcome") if execution.status == "SUCCEEDED" else execution.error
        tally.outcomes[outcome] += 1
        reported.setdefault(request.get("changeId"), set()).add(outcome)
        if execution.status == "SUCCEEDED" and outcome not in ("applied", "stale", "duplicate"):
            problems.append(f"{execution.name} succeeded with outcome {outcome!r}")
        if execution.status == "FAILED" and execution.error not in NAMED_ERRORS:
            problems.append(f"{execution.name} failed with an unnamed error {execution.error!r}")
        if execution.status not in ("SUCCEEDED", "FAILED", UNKNOWN):  # UNKNOWN: OutcomeUnknown, never false
            problems.append(f"{execution.name} ended {execution.status}")
    state = cf.entity(entity)
    versions = state["versions"]
    numbers = [v["version"] for v in versions]
    if numbers != list(range(1, len(numbers) + 1)):
        problems.append(f"versions not contiguous from 1: {numbers}")
    ids = [v["changeId"] for v in versions]
    if len(ids) != len(set(ids)):
        problems.append(f"a change wrote two versions: {sorted(i for i, n in Counter(ids).items() if n > 1)}")
    latest = state["latest"]
    if versions and (latest is None or latest["version"] != numbers[-1]):
        problems.append(f"v0 is not the highest version {numbers[-1]}")
    requests = {r.get("changeId"): r for r, _ in submitted}
    by_number = {v["version"]: v for v in versions}
    for v in versions:
        request = requests.get(v["changeId"])
        if request is None:
            problems.append(f"version {v['version']} written by unknown change {v['changeId']!r}")
            continue
        if request["operation"] == "put":
            expected = request["attributes"]
        elif request["operation"] == "patch":  # its predecessor's content with the patch applied, but for the
            before = by_number.get(v["version"] - 1)  # fields a newer change wrote (issue 34: the model checks which)
            lost = set((v.get("patch") or {}).get("superseded") or [])
            expected = apply_patch(before["attributes"],
                                   {k: x for k, x in request.get("set", {}).items() if k not in lost},
                                   [name for name in request.get("remove", []) if name not in lost]) if before else None
        elif request["operation"] == "rollback":
            source = by_number.get(request["toVersion"])
            expected = source["attributes"] if source else None
        else:
            expected = {}
        if expected is not None and v["attributes"] != expected:
            problems.append(f"version {v['version']} content is not change {v['changeId']!r}'s")
        if v["deleted"] != (request["operation"] == "delete"):
            problems.append(f"version {v['version']} deleted flag does not match its operation")
    by_arn = {execution.arn: execution for _, execution in submitted}
    for v in versions:  # the execution that wrote a version says so: applied, that version
        writer = by_arn.get(v.get("executionArn"))
        said = ((writer.output or {}).get("outcome"), (writer.output or {}).get("version")) if writer else None
        if writer and writer.status == "SUCCEEDED" and said != ("applied", v["version"]):
            problems.append(f"misreported: {writer.name} wrote version {v['version']} and said {said}")
        if writer and writer.status == "FAILED" and writer.error != "HistoryWriteFailed":
            problems.append(f"misreported: {writer.name} wrote version {v['version']} and failed {writer.error}")
    for change_id, outcomes in reported.items():
        if "applied" in outcomes and change_id not in ids:
            problems.append(f"change {change_id!r} was reported applied but has no version")
        if outcomes == {"stale"} and change_id in ids:
            problems.append(f"change {change_id!r} was reported stale but wrote a version")
    problems.extend(f"verify: {p}" for p in verify(cf, entity).problems)
    tally.violations.extend(f"{tally.guarantee} [{entity}]: {p}" for p in problems)


def submit_all(cf: Changeflow, requests: list[dict], concurrency: int) -> list[tuple[dict, Execution]]:
    if concurrency <= 1:
        return [(r, cf.submit(r)) for r in requests]
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return list(zip(requests, pool.map(cf.submit, requests)))


# --- 1. hot key -------------------------------------------------------------------------------------
def hot_key(cf: Changeflow, k: int, shared_time: bool, seed: int, name: str | None = None,
            patches: bool = False) -> Tally:
    """K concurrent changes to one entity; with one shared effectiveAt every one of them must apply.
    ``patches``: the entity is created first, then K patches each set a field of their own: every field
    must be in the final content (no lost update)."""
    rng = random.Random(seed)
    tally = Tally("1. hot key" + (", patches" if patches else ""))
    entity = name or f"hot-{seed}-{k}-{shared_time}{'-patch' if patches else ''}"
    submitted = []
    if patches:
        base = put(entity, T0, f"{entity}-base", base=True)
        submitted.append((base, cf.submit(base)))
        requests = [{"entityId": entity, "operation": "patch", "set": {f"f{i}": i}, "changeId": f"{entity}-p{i}",
                     "effectiveAt": T0 if shared_time else T0 + rng.randrange(k)} for i in range(k)]
    else:
        requests = [put(entity, T0 if shared_time else T0 + rng.randrange(k), f"{entity}-c{i}", n=i) for i in range(k)]
    submitted += submit_all(cf, requests, concurrency=k)
    tally.cases += 1
    check(cf, entity, submitted, tally)
    if shared_time:
        not_applied = [e.name for _, e in submitted if (e.output or {}).get("outcome") != "applied"]
        if not_applied:
            tally.violations.append(f"hot key [{entity}]: with one shared effectiveAt, {len(not_applied)} did not apply")
    if patches and shared_time:
        latest = (cf.entity(entity)["latest"] or {}).get("attributes") or {}
        lost = [f"f{i}" for i in range(k) if latest.get(f"f{i}") != i]
        if lost or latest.get("base") is not True:
            tally.violations.append(f"hot key [{entity}]: fields lost from the final content: {lost or ['base']}")
    return tally


# --- 2. faults at every step boundary ---------------------------------------------------------------
# the functions the definition invokes (the history step tags expiries too: issue 37.2; the retired
# TagTtlFunction only serves the executions of earlier releases)
STEPS = ["FetchLatestFunction", "UpdateLatestFunction", "DeleteTombstoneFunction", "PutHistoryFunction"]
KINDS = ["before", "lost", "timeout", "service", "throttle"]


def fault_case(stack, cf: Changeflow, step: str, kind: str, times: int, tally: Tally) -> None:
    """Create, update, delete and revive one entity while ``step`` suffers ``kind`` ``times`` times."""
    injector = Injector()
    entity = f"fault-{step}-{kind}-{times}"
    requests = [put(entity, T0, f"{entity}-1", v=1), put(entity, T0 + 1, f"{entity}-2", v=2),
                {"entityId": entity, "operation": "delete", "effectiveAt": T0 + 2, "changeId": f"{entity}-3"},
                put(entity, T0 + 3, f"{entity}-4", v=4)]
    function = stack.function(step)
    stack.lambdas.load(function)
    if kind == "throttle":
        operation = {"FetchLatestFunction": "Query"}.get(step, "PutItem")  # its one read, or its put
        code = THROTTLE_CODES[times % 2]
        with injector.throttle(function, operation, times, code):
            submitted = [(r, cf.submit(r)) for r in requests]
    else:
        with injector.around(stack.lambdas, [(step, kind, times)]):
            submitted = [(r, cf.submit(r)) for r in requests]
    tally.cases += 1
    tally.faults.update(injector.injected)
    check(cf, entity, submitted, tally)
    final = cf.entity(entity)["latest"]
    if all(e.status == "SUCCEEDED" for _, e in submitted) and (final is None or final["attributes"] != {"v": 4}):
        tally.violations.append(f"faults [{entity}]: every execution succeeded but v0 is not the last change")


def faults(stack, cf: Changeflow, times: tuple[int, ...] = (1, 2)) -> Tally:
    tally = Tally("2. faults at every step boundary")
    for step in STEPS:
        for kind in KINDS:
            for n in times:
                fault_case(stack, cf, step, kind, n, tally)
    return tally


# --- 2b. every fault with another writer in the window it opens ---------------------------------------
WINDOW_KINDS = ["before", "lost", "timeout", "service"]  # a throttle the SDK absorbs opens no window here


def writer_in_window_case(stack, cf: Changeflow, step: str, kind: str, tally: Tally, again: bool = False) -> None:
    """One change suffers ``kind`` at ``step``; another writer to the same entity, at the same effectiveAt,
    starts then and runs to its end before the faulted execution goes on (its back-off or Retry waits).
    Both must apply, every version must be in history, and each execution must say what it did.
    ``again``: the other writer is the same change delivered again (another execution): one version, the
    execution that wrote it says applied, the other duplicate."""
    injector = Injector()
    entity, at = f"window-{step}-{kind}{'-again' if again else ''}", T0 + 1
    base = put(entity, T0, f"{entity}-0", base=True)
    other = {"entityId": entity, "operation": "patch", "set": {"other": True}, "effectiveAt": at,
             "changeId": f"{entity}-other"}
    if step == "DeleteTombstoneFunction":
        mine = {"entityId": entity, "operation": "delete", "effectiveAt": at, "changeId": f"{entity}-mine"}
        other = put(entity, at, f"{entity}-other", other=True)  # a patch of a deleted entity is NotFound
    elif step == "FetchLatestFunction":
        mine = {"entityId": entity, "operation": "patch", "set": {"mine": True}, "effectiveAt": at,
                "changeId": f"{entity}-mine"}
    else:
        mine = put(entity, at, f"{entity}-mine", mine=True)
    if again:
        other = mine
    submitted = [(base, cf.submit(base))]
    start = (lambda: [cf.start(mine, name=f"{entity}-again")[1]]) if again else (lambda: [cf.start(other)[1]])
    with injector.writer_in_window(stack.lambdas, step, kind, mine["changeId"], start) as others:
        mine_execution = cf.submit(mine)
    submitted.append((mine, mine_execution))
    if not others:
        tally.violations.append(f"faults x concurrency [{entity}]: the fault never fired")
    submitted += [(other, cf.wait(arn)) for arn in others]
    tally.cases += 1
    tally.faults.update(injector.injected)
    check(cf, entity, submitted, tally)
    said = sorted((e.output or {}).get("outcome") or e.error for _, e in submitted[1:])
    expected = ["applied", "duplicate"] if again else ["applied", "applied"]
    if said != expected:
        tally.violations.append(f"faults x concurrency [{entity}]: at one effectiveAt, said {said}, not {expected}")
    if Holds.release(mine_execution.name):
        tally.violations.append(f"faults x concurrency [{entity}]: the window was never held open")


def writers_in_windows(stack, cf: Changeflow, tally: Tally | None = None) -> Tally:
    tally = tally or Tally("2b. every fault with another writer in its window")
    for step in STEPS:
        for kind in WINDOW_KINDS:
            for again in (False, True):
                writer_in_window_case(stack, cf, step, kind, tally, again=again)
    return tally


def history_outage(stack, cf: Changeflow) -> Tally:
    """A history put that keeps failing ends in HistoryWriteFailed, verify detects it, repair fixes it."""
    tally = Tally("2. faults: history outage and repair")
    injector = Injector()
    entity = "outage"
    request = put(entity, T0, "outage-1", v=1)
    with injector.around(stack.lambdas, [("PutHistoryFunction", "before", 100)]):
        execution = cf.submit(request)
    tally.cases += 1
    tally.executions += 1
    tally.faults.update(injector.injected)
    if execution.error != "HistoryWriteFailed":
        tally.violations.append(f"history outage ended {execution.status} {execution.error}, not HistoryWriteFailed")
    if verify(cf, entity).ok:
        tally.violations.append("verify did not detect the missing history item")
    done, cannot = repair(cf, entity)
    if not done or cannot or not verify(cf, entity).ok:
        tally.violations.append(f"repair did not restore the entity: {done} {cannot}")
    return tally


# --- 3. duplicates ----------------------------------------------------------------------------------
def duplicates(cf: Changeflow, seed: int, changes: int = 6) -> Tally:
    """Each change delivered again, right after itself or after other changes (as a new execution), and
    again with a newer effectiveAt (a retry that took a new default time): never a second version."""
    rng = random.Random(seed)
    tally = Tally("3. duplicates")
    entity = f"dup-{seed}"
    originals = [put(entity, T0 + rng.choice([0, 0, 1, 2]) if i else T0, f"{entity}-c{i}", n=i) for i in range(changes)]
    originals.sort(key=lambda r: r["effectiveAt"])
    deliveries = []
    for i, request in enumerate(originals):
        deliveries.append(request)
        if rng.random() < 0.5:
            deliveries.append(request)  # right after
    deliveries += rng.sample(originals, k=len(originals) // 2)  # after other changes
    # a client's retry that took a newer effectiveAt (a new default time): still the same change
    deliveries += [{**r, "effectiveAt": r["effectiveAt"] + 100} for r in rng.sample(originals, k=2)]
    submitted = [(r, cf.submit(r)) for r in deliveries]
    tally.cases += 1
    check(cf, entity, submitted, tally)
    return tally


# --- 4. out-of-order delivery -----------------------------------------------------------------------
def out_of_order(cf: Changeflow, seed: int, changes: int = 8, concurrency: int = 4) -> Tally:
    """Shuffled timestamps in any order and concurrency: v0 ends as the change with the highest
    effectiveAt (ties: the one applied later), and every rejected change is reported stale."""
    rng = random.Random(seed)
    tally = Tally("4. out-of-order delivery")
    entity = f"ooo-{seed}-{concurrency}"
    times = [T0 + rng.randrange(changes // 2 + 1) for _ in range(changes)]
    requests = [put(entity, at, f"{entity}-c{i}", n=i) for i, at in enumerate(times)]
    rng.shuffle(requests)
    submitted = submit_all(cf, requests, concurrency)
    tally.cases += 1
    check(cf, entity, submitted, tally)
    top = max(times)
    state = cf.entity(entity)
    latest = state["latest"]
    winners = [v for v in state["versions"] if v["effectiveAt"] == top]
    if latest["effectiveAt"] != top or latest["changeId"] != winners[-1]["changeId"]:
        tally.violations.append(f"out of order [{entity}]: v0 is not the latest-applied change at the highest time")
    written = {v["changeId"] for v in state["versions"]}
    for request, execution in submitted:
        if request["changeId"] not in written and (execution.output or {}).get("outcome") != "stale":
            tally.violations.append(f"out of order [{entity}]: rejected {request['changeId']} not reported stale")
    return tally


def report(tallies: list[Tally]) -> str:
    from ..report import table

    rows = [t.row() for t in tallies]
    total = Tally("all")
    for t in tallies:
        total.add(t)
    rows.append(total.row())
    out = table(["guarantee", "cases", "faults injected", "executions", "violations"], rows, max_width=50)
    faults = Counter()
    for t in tallies:
        faults.update(t.faults)
    if faults:
        out += "\n\nfaults injected by kind: " + ", ".join(f"{k}: {n}" for k, n in sorted(faults.items()))
    for t in tallies:
        out += "".join(f"\nVIOLATION {v}" for v in t.violations)
    return out


def apply_patch(content: dict[str, Any], set_: dict[str, Any], remove: list[str]) -> dict[str, Any]:
    """The patch rule (the invariants' and the reference model's), written apart from the code under test:
    set replaces or adds top-level fields, remove drops them."""
    return {name: value for name, value in {**content, **set_}.items() if name not in remove}



# --- 5. model-based: checks/reference_model.py ---------------------------------------------------------


# --- 6. the API path: POST /changes on `changeflow serve` -----------------------------------------------
API_FAILURES = ("ValidationError", "VersionConflict", "LambdaOutage")


def api_entity_ids(rng: random.Random, count: int, run: int = 0) -> list[str]:
    """Ids a user or an attacker would try: Unicode, ``/``, ``#``, spaces, ``%``, long shared prefixes
    (distinct across runs ``run`` on one stack, so that each case's change is its entity's only one)."""
    alphabet = "ab/#% ?+ユーザーデータü東京😀-_.1"
    shared = "tenant#" + "x" * 70 + "/"
    found: list[str] = []
    while len(found) < count:
        kind = len(found) % 3
        tail = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        entity = shared + f"{run}/" + tail if kind == 0 else (f"doc{run}:{tail}" if kind == 1 else f"{tail}~{run}")
        if entity not in found:
            found.append(entity)
    return found


def _post(api: str, request: dict) -> tuple[int, dict]:
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    body = json.dumps(request).encode("utf-8")
    signed = AWSRequest(method="POST", url=f"{api}/changes", data=body, headers={"Content-Type": "application/json"})
    SigV4Auth(Credentials("testing", "testing"), "execute-api", "us-east-1").add_auth(signed)  # serve's default key
    return post_json(f"{api}/changes", body, dict(signed.headers.items()))


def post_json(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    """POST ``body`` to ``serve`` with ``headers``: the status and the JSON answer, an error status included."""
    import urllib.error
    import urllib.request

    http = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(http, timeout=60) as response:  # noqa: S310 - serve on 127.0.0.1
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def api_retries(server, seed: int, entities: int = 12) -> Tally:
    """Every change through ``POST /changes``: a first attempt that fails (a named error or a Lambda
    outage; an invalid request is refused at once and starts nothing), the corrected retry with the same changeId (must run and apply), and a redelivery of it
    (must answer the succeeded execution and start nothing). Violations: a change lost (not stored
    exactly once with the corrected content) or answered wrongly (a status or execution that is not what
    happened, or two entities' changes answered by one execution)."""
    from ..local.lambdas import LambdaServiceError, fault_hook
    from ..local.moto_patches.stepfunctions.termination import wait_for_termination

    rng = random.Random(seed)
    tally = Tally("6. API: retries and redeliveries (POST /changes)")
    cf = Changeflow.for_aws_stack("changeflow", server.stack.region, endpoint_url=server.url)
    api = f"{server.url}/{server.routes[0].stage}"
    arns: set[str] = set()

    def outage(function, event, invoke):
        if function.logical_id == "FetchLatestFunction":
            raise LambdaServiceError()
        return invoke()

    for number, entity in enumerate(api_entity_ids(rng, entities, run=seed)):
        tally.cases += 1
        failure = API_FAILURES[number % len(API_FAILURES)]
        change = f"c{rng.randrange(10**6)}"
        good = {"entityId": entity, "operation": "put", "changeId": change, "attributes": {"n": number}}
        bad = {**good, "attributes": {"version": 1}} if failure == "ValidationError" else \
            {**good, "expectedVersion": 7} if failure == "VersionConflict" else good
        tally.faults[failure] += 1

        def answered(status: int, answer: dict, expected_status: str, what: str) -> str | None:
            if status != 200 or answer.get("status") != expected_status or not answer.get("executionArn"):
                tally.violations.append(f"{entity!r} {what}: answered {status} {answer}")
                return None
            return answer["executionArn"]

        if failure == "LambdaOutage":
            with fault_hook(server.stack.lambdas, outage):
                first = answered(*_post(api, bad), "RUNNING", "first attempt")
                first and wait_for_termination(first, 60)
        elif failure == "ValidationError":  # refused at once, naming the field: nothing starts (issue 27.7)
            status, refused = _post(api, bad)
            if status != 400 or refused.get("field") != "attributes.version":
                tally.violations.append(f"{entity!r} invalid first attempt: answered {status} {refused}")
            first = None
        else:
            first = answered(*_post(api, bad), "RUNNING", "first attempt")
            first and wait_for_termination(first, 60)
        retry = answered(*_post(api, good), "RUNNING", "retry after failure")
        if retry is None:
            continue
        wait_for_termination(retry, 60)
        tally.executions += 1 + (first is not None)
        status, again = _post(api, good)
        redelivered = answered(status, again, "SUCCEEDED", "redelivery")
        if redelivered != retry or again.get("outcome") != "applied":
            tally.violations.append(f"{entity!r} redelivery answered {again}, not the applied execution {retry}")
        started = {arn for arn in (first, retry) if arn}
        if started & arns or first == retry:
            tally.violations.append(f"{entity!r}: an execution answered for two changes")
        arns.update(started)
        tally.outcomes[str(cf.wait(retry).output.get("outcome"))] += 1
        stored = cf.entity(entity)
        versions = [(v["version"], v["changeId"], v["attributes"]) for v in stored["versions"]]
        if versions != [(1, change, {"n": number})] or (stored["latest"] or {}).get("attributes") != {"n": number}:
            tally.violations.append(f"{entity!r}: change lost or altered; history {versions}")
    return tally
