"""Operations built on others, through the command line as a user runs them: versions written before the
chain (the world before an upgrade), ``adopt`` (``--all``, ``--close``), ``redact``, ``digest``, ``export``
(with its digest) and ``proof``. The files they write are kept under the run's directory, and the
auditor keeps a copy of each digest outside the insider's reach (as docs/audit.md tells an auditor to)."""

from __future__ import annotations

from typing import Any

from changeflow_core import model

from .check_writes import check_outcomes, check_versions
from .plan import T0, cid, put
from .world import Run, World


def record_cli_runs(world: World, out: str) -> list[Run]:
    """The executions a command printed with ``--json`` (one object a line), as runs told what it says."""
    import json

    from ...client import Execution

    runs = []
    for line in out.splitlines():
        try:
            shown = json.loads(line)
        except ValueError:
            continue
        if not isinstance(shown, dict) or not shown.get("arn"):
            continue
        execution = Execution(shown["name"], shown["arn"], shown["status"], shown.get("input"),
                              shown.get("output"), shown.get("error"), shown.get("cause"))
        request = _request_of(shown.get("input"))
        run = Run(world.op, request, execution.arn, execution.name, execution)
        said = (execution.output or {}).get("outcome") if execution.status == "SUCCEEDED" else execution.error
        run.told.append((execution.status, said))
        world.runs.append(run)
        runs.append(run)
    return runs


def _request_of(execution_input: Any) -> dict[str, Any]:
    from changeflow_core import principal

    try:
        request = principal.request_in(execution_input)
    except Exception:  # noqa: BLE001 - shown as it is
        request = None
    return request if isinstance(request, dict) else {}


def run_legacy(world: World, op: dict[str, Any]) -> None:
    """Versions written before the chain: written through the workflow, then every chain attribute removed
    from them and from ``v0``, as a table from before the chain holds them (docs/audit.md, adoption)."""
    from .writes import run_changes

    entity = op["entity"]
    requests = [put(entity, cid(entity, f"legacy{j}"), T0 + j, n=j, ssn=f"{world.seed}-{j}")
                for j in range(op["versions"])]
    for request in requests:
        run_changes(world, {"seed": op["seed"], "entity": entity, "requests": [request]})
    for version in [None, *range(1, op["versions"] + 1)]:
        table = world.cf.table if version is None else world.cf.history_table
        sk = model.LATEST_SK if version is None else model.history_sk(version)
        world.cf.dynamodb.update_item(TableName=table, Key={model.PK: {"S": entity}, model.SK: {"S": sk}},
                                      UpdateExpression=f"REMOVE {model.PREV_HASH}, {model.CHAIN_HASH}")
    world.legacy.add(entity)


def run_adopt(world: World, op: dict[str, Any]) -> None:
    args = ["adopt", "--all", "--reason", "upgrade", "--json"] + (["--close"] if op.get("close") else [])
    result = world.cli(*args)
    world.log.append(f"op {world.op}: changeflow {' '.join(args)} -> {result.status}")
    runs = record_cli_runs(world, result.out)
    if result.crashed:
        world.violation("simulation", "simulation.error", f"adopt crashed: {result.crashed}")
    for entity in sorted({r.request.get("entityId") for r in runs if r.request.get("entityId")}):
        if entity not in world.tampered:
            check_outcomes(world, entity, [r for r in runs if r.request.get("entityId") == entity])
    if op.get("close") and result.status == 0:
        world.closed = True


def run_redact(world: World, op: dict[str, Any]) -> None:
    """``changeflow redact ENTITY N``: the content of version N is captured first (what must be gone)."""
    entity, version = op["entity"], op["version"]
    before = {v["version"]: v for v in world.cf.entity(entity)["versions"]}
    if version not in before:
        world.log.append(f"op {world.op}: {entity} has no version {version} to redact (skipped)")
        return
    for number, view in before.items():
        world.contents.setdefault((entity, number), view["attributes"])
    result = world.cli("redact", entity, version, "--reason", "erasure request", "--actor", "dpo@example.com",
                       "--json")
    world.log.append(f"op {world.op}: changeflow redact {entity} {version} -> {result.status}")
    runs = record_cli_runs(world, result.out)
    if result.crashed:
        world.violation("simulation", "simulation.error", f"redact crashed: {result.crashed}")
    if any(r.told and r.told[-1] == ("SUCCEEDED", "applied") for r in runs):
        world.redacted.setdefault(entity, set()).add(version)
    if entity not in world.tampered:
        check_outcomes(world, entity, runs)
        check_versions(world, entity)


def run_digest(world: World, op: dict[str, Any]) -> None:
    path = world.workdir / f"{op['name']}.digest.json"
    result = world.cli("digest", "--all", "--output", path)
    if result.status == 0 and path.exists():
        world.files[op["name"]] = path
        world.auditor[op["name"]] = path.read_bytes()
    else:
        world.log.append(f"op {world.op}: digest failed: {result.status} {result.err.strip()}")


def run_export(world: World, op: dict[str, Any]) -> None:
    out, digest = world.workdir / f"{op['name']}.jsonl", world.workdir / f"{op['name']}.digest.json"
    result = world.cli("export", "--all", "--output", out, "--digest", digest)
    if result.status == 0:
        world.files[op["name"]] = out
        world.files[op["name"] + ".digest"] = digest
        world.auditor[op["name"]] = out.read_bytes()
        world.auditor[op["name"] + ".digest"] = digest.read_bytes()
    else:
        world.log.append(f"op {world.op}: export failed: {result.status} {result.err.strip()}")


def run_proof(world: World, op: dict[str, Any]) -> None:
    digest = world.files.get(op["digest"])
    if digest is None:
        return
    versions = [v["version"] for v in world.cf.entity(op["entity"])["versions"]]
    if not versions:
        return
    path = world.workdir / f"{op['name']}.proof.json"
    result = world.cli("proof", op["entity"], versions[0], "--digest", digest, "--output", path)
    if result.status == 0:
        world.files[op["name"]] = path
        world.proven[op["name"]] = (op["entity"], versions[0], op["digest"])
    else:
        world.log.append(f"op {world.op}: proof refused: {result.status} {result.err.strip()}")


def run_ttl(world: World, op: dict[str, Any]) -> None:
    """Time passes: DynamoDB TTL deletes every item whose expiry has come (as it may at any time after it;
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/howitworks-ttl.html). A retention window
    tags the versions that leave it; with HistoryRetentionDays 0 they expire at once."""
    import time

    now = int(time.time())
    for table in sorted({world.cf.table, world.cf.history_table}):
        pages = world.cf.dynamodb.get_paginator("scan").paginate(TableName=table)
        for item in (i for page in pages for i in page["Items"]):
            expires = item.get(model.EXPIRES_AT, {}).get("N")
            if expires is not None and int(expires) <= now and item[model.SK]["S"] != model.LATEST_SK:
                world.cf.dynamodb.delete_item(TableName=table, Key={model.PK: item[model.PK], model.SK: item[model.SK]})
                world.log.append(f"op {world.op}: TTL deleted {item[model.PK]['S']} {item[model.SK]['S']}")
