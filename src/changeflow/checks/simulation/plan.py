"""From a seed, the plan: the stack's configuration and a list of operations, every choice drawn here (the
scheduler's and the faults' too are drawn from each operation's own ``seed``), so that a seed is a
reproduction and any subset of its operations is one too (the shrinker's).

A plan composes **workloads**, each a short story a user, a fault or an attacker would play, with its
parameters drawn at random; their operations are interleaved. The ingredients are generic (K writers, a
fault at a step boundary and failures after it, a redaction of any version, an import of odd input with
kills and resumes, an insider's tactic, a credential that changed): nothing below names a bug.

- ``hot``: a base version, then K writers to one entity at once (2-8, or 17-24: past the 16 change ids
  ``v0`` remembers), puts, patches of fields of their own, or a mix with deletes and rollbacks; one shared
  effective time, the victim's older, distinct ones, or the server's; a fault on one writer (any kind, at
  any step), which often goes first and whose wait may last until the others end; redeliveries.
- ``faults``: changes one at a time, each with a fault and often a storm of failures after it (every step
  of that change failing N times: retries exhausted); redrives of what failed; a change after them.
- ``redact``: versions holding personal data, redactions of any of them (through the CLI), then every read
  surface: the API's latest, versions and as-of reads, and an export.
- ``import``: a JSON Lines source of one to three entities (up to 20 records each; per-entity sequence
  numbers as change ids, or derived ones; one ``--effective-at`` or a field), lines nested 5,000 deep or
  in Latin-1, run at concurrency 1 or all at once, killed (Ctrl-C) and resumed, run again without its
  checkpoint, resumed from a checkpoint with a broken line.
- ``adopt``: entities written before the chain, adopted (``--all --close`` or one by one), time passing
  (DynamoDB TTL deletes what a retention window let expire), a digest, an insider's tactic, the audit.
- ``insider``: an entity's history, a digest, an export and a proof, an insider's tactic on the table or on
  a file, the audit.
- ``identity``: signed changes on ``serve`` from users, a role session, a key made Inactive, a session
  expired, a user whose IAM path looks like the policy's pattern, a body swapped under a signature, an
  unsigned payload, a user whose IAM policy was tightened.
"""

from __future__ import annotations

import random
from typing import Any, Callable

T0 = 1_767_225_600_000
STEPS = ["FetchLatestFunction", "UpdateLatestFunction", "PutHistoryFunction"]  # the workflow's (issue 37.2: three)
# on the happy path, how many invocations of a change come before and including each step
POSITION = {"FetchLatestFunction": 1, "UpdateLatestFunction": 2, "DeleteTombstoneFunction": 2,
            "PutHistoryFunction": 3}
FAULT_KINDS = ["lost", "lost", "lost", "timeout", "timeout", "before", "service", "throttle", "throttle-out"]
WORKLOADS = {"hot": 5, "faults": 3, "redact": 3, "import": 3, "adopt": 2, "insider": 3, "identity": 2}
TABLE_TACTICS = ["rewrite", "relabel-principal", "relabel-actor", "relabel-change", "delete", "swap", "strip",
                 "forge-recomputed", "append-forged"]
FILE_TACTICS = ["digest-head", "digest-drop", "export-item", "export-delete-line", "export-cut-to-head",
                "export-forge-field", "export-flip-expiry", "proof-edit"]
ADOPT_TACTICS = ["launder", "launder", "rewrite-legacy", "rewrite-legacy", "strip-one", "strip-all"]
# docs/identity.md's example and its name-prefix variant, a role's sessions, and serve's default signer (the
# reads'). A direct StartExecution has no principal that a policy could admit: with a policy, every write of
# the seed goes through POST /changes.
POLICY = ('[{"principals": ["arn:aws:iam::123456789012:user/ops/*", "arn:aws:iam::123456789012:user/ops-*", '
          '"arn:aws:sts::123456789012:assumed-role/writer/*", "arn:aws:sts::123456789012:user/moto"], '
          '"entities": [""], "operations": ["put", "patch", "delete", "rollback", "redact", "adopt", "read"]}]')


def cid(entity: str, suffix: str) -> str:
    """A change id of ``entity``'s (the API's pattern has no ``#``)."""
    return f"{entity.replace('#', '-')}-{suffix}"


def put(entity: str, change: str, at: int | None, **attributes) -> dict[str, Any]:
    request = {"entityId": entity, "operation": "put", "changeId": change, "attributes": attributes}
    return request if at is None else {**request, "effectiveAt": at}


def changes(entity: str, requests: list[dict], **more) -> dict[str, Any]:
    return {"kind": "changes", "entity": entity, "requests": requests, **more}


# --- the workloads -----------------------------------------------------------------------------------------
def hot(rng: random.Random, i: int) -> list[dict]:
    e = f"hot#{i}"
    k = rng.randint(2, 8) if rng.random() < 0.35 else rng.randint(17, 24)
    mode = rng.choice(["puts", "patches", "patches", "mixed"])
    times = rng.choice(["shared", "victim-older", "distinct", "server"])
    base_at = None if times == "server" else T0
    ops = [changes(e, [put(e, cid(e, "base"), base_at, base=True)])]

    def at(j: int) -> int | None:
        return {"shared": T0 + 1, "victim-older": T0 + 1 + (j > 0), "distinct": T0 + 1 + rng.randrange(k),
                "server": None}[times]

    requests = []
    for j in range(k):
        change = cid(e, f"w{j}")
        kind = mode if mode != "mixed" else rng.choice(["puts", "patches", "patches", "delete", "rollback"])
        if kind == "puts":
            request = put(e, change, at(j), n=j)
        elif kind == "patches":
            request = {"entityId": e, "operation": "patch", "changeId": change, "set": {f"f{j}": j}}
        elif kind == "delete":
            request = {"entityId": e, "operation": "delete", "changeId": change}
        else:
            request = {"entityId": e, "operation": "rollback", "changeId": change, "toVersion": 1}
        if kind != "puts" and at(j) is not None:
            request["effectiveAt"] = at(j)
        requests.append(request)
    for _ in range(rng.choice([0, 0, 1, 2])):  # a change delivered again, as another execution
        requests.append(dict(rng.choice(requests)))
    more: dict[str, Any] = {"hold": rng.choice([0.0, 0.3, 0.9]), "sticky": rng.choice([0.0, 0.5, 0.8]),
                            "via": "api" if rng.random() < 0.15 else "stepfunctions"}
    if rng.random() < 0.75:
        victim = requests[0]
        step = "UpdateLatestFunction" if rng.random() < 0.6 else rng.choice(STEPS)
        if victim["operation"] == "delete" and step == "UpdateLatestFunction":
            step = "DeleteTombstoneFunction"
        more["faults"] = [[victim["changeId"], step, rng.choice(FAULT_KINDS), 1, 0]]
        if rng.random() < 0.8:
            more["eager"] = [victim["changeId"]]  # the victim goes first
        if rng.random() < 0.7:
            more["patient"] = [victim["changeId"]]  # and its back-off outlasts everyone
    ops.append(changes(e, requests, **more))
    return ops


def faults(rng: random.Random, i: int) -> list[dict]:
    e = f"flt#{i}"
    ops = [changes(e, [put(e, cid(e, "base"), T0, n=0)])]
    for j in range(1, rng.randint(2, 4)):
        change = cid(e, f"c{j}")
        request = put(e, change, T0 + j, n=j) if rng.random() < 0.7 else {
            "entityId": e, "operation": "patch", "changeId": change, "set": {f"f{j}": j}, "effectiveAt": T0 + j}
        step = rng.choice(STEPS + ["UpdateLatestFunction"])
        plan = [[change, step, rng.choice(["lost", "timeout", "before", "service", "throttle-out"]), 1, 0]]
        if rng.random() < 0.7:  # a storm after it: every step of the change fails N times in a row
            plan.append([change, "*", rng.choice(["before", "service", "throttle-out"]), rng.choice([2, 6, 7]),
                         POSITION[step]])
        ops.append(changes(e, [request], faults=plan))
        if rng.random() < 0.4:
            ops.append({"kind": "redrive", "entity": e})
    ops.append(changes(e, [put(e, cid(e, "after"), T0 + 10, n=10)]))
    return ops


def redact(rng: random.Random, i: int) -> list[dict]:
    e = f"pii#{i}"
    count = rng.randint(2, 4)
    ops = []
    for j in range(count):
        if j and rng.random() < 0.25:
            ops.append(changes(e, [{"entityId": e, "operation": "patch", "changeId": cid(e, f"c{j}"),
                                    "set": {"ssn": f"{i}-{j}-{rng.randrange(10**6)}"}, "effectiveAt": T0 + j}]))
        else:
            ssn = f"{i}-{j}-{rng.randrange(10**6)}"
            ops.append(changes(e, [put(e, cid(e, f"c{j}"), T0 + j, name=f"n{j}", ssn=ssn)]))
    versions = count
    for _ in range(rng.randint(1, 3)):
        target = rng.randint(1, versions) if rng.random() < 0.6 else versions  # often the newest
        ops.append({"kind": "redact", "entity": e, "version": target})
        versions += 1
        if rng.random() < 0.3:
            ops.append({"kind": "reads", "entity": e})
    ops.append({"kind": "reads", "entity": e, "export": True})
    return ops


def import_(rng: random.Random, i: int) -> list[dict]:
    per_entity_ids = rng.random() < 0.5  # sequence numbers per entity: the same ids in every entity
    entities = [f"imp#{i}-{c}" for c in "abc"[:rng.randint(2 if per_entity_ids else 1, 3)]]
    fixed = rng.random() < 0.7
    per: dict[str, list[dict]] = {}
    for e in entities:
        many = rng.randint(17, 20) if rng.random() < 0.4 else rng.randint(1, 6)
        for j in range(many):
            record = {"id": e, "n": j, "v": f"{e}/{j}/{rng.randrange(10**6)}"}
            if per_entity_ids:
                record["seq"] = str(j + 1)
            if not fixed:
                record["at"] = T0 + j
            per.setdefault(e, []).append({"record": record})
    slots = [e for e in entities for _ in per[e]]
    if rng.random() < 0.5:
        rng.shuffle(slots)  # the entities' records interleaved, each entity's in its own order
    records = [per[e].pop(0) for e in slots]
    if rng.random() < 0.35:
        records.insert(rng.randrange(len(records) + 1), {"deep": 5000, "id": entities[0]})
    if rng.random() < 0.35:
        records.insert(rng.randrange(len(records) + 1), {"latin1": "Café Müller", "id": f"imp#{i}-l"})
    runs: list[dict] = []
    if rng.random() < 0.55:
        runs += [{"run": "kill", "after": rng.randint(1, max(1, len(records) // 2))}, {"run": "resume"}]
    else:
        runs.append({"run": "first"})
    if rng.random() < 0.3:
        runs += [{"run": "break-checkpoint", "line": rng.choice(["{}", "[1,2]"])}, {"run": "resume"}]
    if rng.random() < 0.35:
        runs.append({"run": "again-without-checkpoint"})
    n = len(records)
    concurrency = rng.choice([1, n, 16 if n <= 16 else n])
    return [{"kind": "import", "name": f"imp{i}", "records": records, "fixed": fixed, "changeIdField": per_entity_ids,
             "concurrency": concurrency, "runs": runs}]


def adopt(rng: random.Random, i: int) -> list[dict]:
    e = f"old#{i}"
    legacy = rng.randint(2, 3)
    ops: list[dict] = [{"kind": "legacy", "entity": e, "versions": legacy}]
    ops.append({"kind": "adopt", "close": rng.random() < 0.7})
    if rng.random() < 0.6:
        ops.append({"kind": "ttl"})  # time passes: DynamoDB TTL deletes what has expired
    ops.append({"kind": "digest", "name": f"d{i}"})
    if rng.random() < 0.3:
        ops.append(changes(e, [put(e, cid(e, "later"), T0 + 10, n=10)]))
    ops.append({"kind": "insider", "entity": e, "tactic": rng.choice(ADOPT_TACTICS), "digest": f"d{i}",
                "version": rng.randint(1, legacy)})
    return ops


def insider(rng: random.Random, i: int) -> list[dict]:
    e = f"doc#{i}"
    ops = [changes(e, [put(e, cid(e, f"c{j}"), T0 + j, n=j, who=f"w{j}")])
           for j in range(rng.randint(2, 5))]
    if rng.random() < 0.3:
        ops.append({"kind": "ttl"})
    ops.append({"kind": "digest", "name": f"d{i}"})
    if rng.random() < 0.5:
        ops.append(changes(e, [put(e, cid(e, "after"), T0 + 20, n=20)]))
    files = rng.random() < 0.5
    tactic = rng.choice(FILE_TACTICS if files else TABLE_TACTICS)
    if tactic.startswith("export") or rng.random() < 0.4:
        ops.append({"kind": "export", "name": f"x{i}"})
    if tactic == "proof-edit" or rng.random() < 0.3:
        ops.append({"kind": "proof", "entity": e, "digest": f"d{i}", "name": f"p{i}"})
    ops.append({"kind": "insider", "entity": e, "tactic": tactic, "digest": f"d{i}", "export": f"x{i}",
                "proof": f"p{i}", "seed": rng.randrange(10**9)})
    return ops


def identity(rng: random.Random, i: int) -> list[dict]:
    e = f"id#{i}"
    kinds = ["user", "role-session", "inactive-key", "expired-session", "path-user", "path-lookalike",
             "name-lookalike", "body-swap", "unsigned-payload", "policy-tightened"]
    chosen = ["user"] + rng.sample(kinds[1:], rng.randint(2, len(kinds) - 1))
    return [{"kind": "identity", "entity": e, "requests": chosen}]


GENERATORS: dict[str, Callable[[random.Random, int], list[dict]]] = {
    "hot": hot, "faults": faults, "redact": redact, "import": import_, "adopt": adopt, "insider": insider,
    "identity": identity}


def plan(seed: int) -> dict[str, Any]:
    """The seed's stack configuration and operations (each with its own ``seed`` and ``workload``)."""
    rng = random.Random(seed)
    names = list(WORKLOADS)
    chosen = []
    for _ in range(rng.randint(2, 4)):
        chosen.append(rng.choices(names, weights=[WORKLOADS[n] for n in names])[0])
    config: dict[str, str] = {}
    if rng.random() < (0.6 if "adopt" in chosen else 0.35):
        config["HistoryRetentionVersions"] = str(rng.choice([3, 4, 6]))
    if "identity" in chosen or rng.random() < 0.2:  # an authorization policy, only where every write can be
        if set(chosen) <= {"identity", "hot"}:  # signed: the rest of the workloads start executions directly
            config["AuthorizationPolicy"] = POLICY
    streams = []
    for number, workload in enumerate(chosen):
        ops = GENERATORS[workload](rng, number)
        for op in ops:
            op["workload"] = f"{workload}{number}"
            op.setdefault("seed", rng.randrange(10**9))
            if "AuthorizationPolicy" in config and op["kind"] == "changes":
                op["via"] = "api"
        streams.append(ops)
    ops = []
    while any(streams):  # interleaved, each workload's operations in its order
        stream = rng.choice([s for s in streams if s])
        ops.append(stream.pop(0))
    return {"seed": seed, "config": config, "workloads": chosen, "ops": ops}
