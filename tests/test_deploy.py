"""Deploys that keep in-flight executions whole (issue 27.1).

A Standard execution keeps the definition it started with when the machine is updated (UpdateStateMachine:
"Running executions will continue to use the previous definition and roleArn",
https://docs.aws.amazon.com/step-functions/latest/apireference/API_UpdateStateMachine.html), and a redrive
reuses it ("Redriven executions use the same state machine definition and execution ARN",
https://docs.aws.amazon.com/step-functions/latest/apireference/API_RedriveExecution.html). So an execution
runs start to end on one release exactly when its definition names immutable code: Lambda version ARNs
(``AutoPublishAlias``), and the writer the fetch step names is a version of the same release.

Release N here is the code, layer and ASL of ``OLD_RELEASE`` (from git), the last release before the
payload contract changed (d1b047b: the fetch step names the writer, the write step raises ChangeIsStale,
the history step takes ``written`` with the content), deployed with this template (versions published);
release N+1 is this checkout. Executions of N are held in flight at three points (before the fetch,
after the v0 write and before the history put, before the expiry tag) while N+1 is deployed and runs, and
an execution of N that failed before the deploy is redriven after it.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import tarfile
import threading
from pathlib import Path

import pytest

from changeflow.client import Changeflow
from changeflow.local.embedded import EmbeddedStack
from changeflow.local.lambdas import LambdaServiceError, fault_hook
from changeflow.local.moto_patches.stepfunctions.clock import Holds
from changeflow_core import model, store
from conftest import ROOT

OLD_RELEASE = "218f8a1"  # the parent of d1b047b, which changed every step's payload
T0 = 1_767_225_600_000
STEP_FUNCTIONS = ("FetchLatestFunction", "UpdateLatestFunction", "PutHistoryFunction", "DeleteTombstoneFunction",
                  "TagTtlFunction")
# which step each execution of release N is held before (by a failed first attempt, whose retry waits for
# the deploy): the change it makes, and the outcome the workflow of release N gives it
IN_FLIGHT = {
    "n-fetch": ("FetchLatestFunction", {"entityId": "a", "operation": "put", "attributes": {"n": 1}}, "applied"),
    "n-history": ("PutHistoryFunction", {"entityId": "b", "operation": "put", "attributes": {"n": 2}}, "applied"),
    "n-tag": ("TagTtlFunction", {"entityId": "c", "operation": "delete"}, "applied"),
    "n-stale": ("FetchLatestFunction", {"entityId": "s", "operation": "put", "attributes": {"n": 4}}, "stale"),
}


def _release_tree(path: Path, rev: str | None, pinned: bool, writers_pinned: bool = True) -> Path:
    """A checkout to deploy: this template, with the code, layer and ASL of ``rev`` (None: this checkout).
    ``pinned=False`` is the template before versions were published (every ARN unqualified: $LATEST);
    ``writers_pinned=False`` leaves only the writers the fetch step names unqualified."""
    path.mkdir(parents=True)
    if rev is None:
        archive = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "functions", "layers", "statemachines"],
                                 capture_output=True, check=True).stdout.decode().split("\0")
        for name in filter(None, archive):
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_bytes((ROOT / name).read_bytes())
    else:
        if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{rev}^{{commit}}"]).returncode:
            pytest.skip(f"release {rev} is not in this clone's history (a shallow clone)")
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "functions", "layers", "statemachines"],
                                 capture_output=True, check=True).stdout
        tarfile.open(fileobj=io.BytesIO(archive)).extractall(path, filter="data")
    template = (ROOT / "template.yaml").read_text()
    placeholders = set(re.findall(r"\$\{(\w+)FunctionArn\}", (path / "statemachines/change.asl.json").read_text()))
    extra = "".join(f"        {name}FunctionArn: !Ref {name}Function.Version\n" for name in sorted(placeholders)
                    if f"        {name}FunctionArn:" not in template)  # release N names its writers in the ASL
    template = template.replace("        PutHistoryFunctionArn:", extra + "        PutHistoryFunctionArn:", 1)
    if not pinned:
        template = re.sub(r"!Ref (\w+)\.Version", r"!GetAtt \1.Arn", template)
    if not writers_pinned:  # the writers the fetch step is given: by the definition, and its environment
        template = re.sub(r"((?:UpdateLatest|DeleteTombstone)FunctionArn|_FUNCTION_ARN): !Ref (\w+)\.Version",
                          r"\1: !GetAtt \2.Arn", template)
    (path / "template.yaml").write_text(template)
    return path


def _invoked(cf: Changeflow, arn: str) -> set[str]:
    """The function ARNs an execution's Lambda tasks invoked, from its execution history."""
    return {json.loads(e["taskScheduledEventDetails"]["parameters"])["FunctionName"]
            for e in cf.history(arn) if e["type"] == "TaskScheduled"}


def _deploy_in_the_middle_of_traffic(tmp_path: Path, pinned: bool):
    release_n = _release_tree(tmp_path / "n", OLD_RELEASE, pinned)
    release_n1 = _release_tree(tmp_path / "n1", None, pinned)
    with EmbeddedStack(release_n, time_scale=0.01) as stack:
        cf = Changeflow.for_embedded(stack)

        def start_on_n(name: str, change: dict) -> str:  # release N's input: the request itself
            return cf.sfn.start_execution(stateMachineArn=cf.state_machine_arn, name=name,
                                          input=json.dumps(change))["executionArn"]

        before = cf.wait(start_on_n("n-before", {"entityId": "s", "operation": "put", "attributes": {"n": 0},
                                                 "effectiveAt": T0 + 1_000, "changeId": "n-before"}))
        assert before.status == "SUCCEEDED", before.cause

        def tag_fails(function, event, invoke):
            if function.logical_id == "TagTtlFunction":
                raise LambdaServiceError()
            return invoke()

        with fault_hook(stack.lambdas, tag_fails):  # a failure of release N: its tag step has no Catch
            failed = cf.wait(start_on_n("n-failed", {"entityId": "d", "operation": "put", "attributes": {"n": 5},
                                                     "effectiveAt": T0 + 2_100, "changeId": "n-failed"}))
        assert failed.status == "FAILED" and failed.error == "Lambda.ServiceException"
        deployed = threading.Event()
        held = set()

        def hold_before(function, event, invoke):
            name = (event.get("execution") or {}).get("name", "")
            if name in IN_FLIGHT and IN_FLIGHT[name][0] == function.logical_id and name not in held:
                held.add(name)
                Holds.hold(name, lambda: deployed.wait(60))  # its retry's back-off waits for the deploy
                raise LambdaServiceError()
            return invoke()

        changes = {}
        with fault_hook(stack.lambdas, hold_before):
            arns = {}
            for i, (name, (_, change, _)) in enumerate(IN_FLIGHT.items()):
                at = T0 + (1 if name == "n-stale" else 2_000 + i)
                changes[name] = {**change, "effectiveAt": at, "changeId": name}
                arns[name] = start_on_n(name, changes[name])
            for _ in range(3000):  # up to 30 s on a loaded machine
                if held == set(IN_FLIGHT):
                    break
                threading.Event().wait(0.01)
            assert held == set(IN_FLIGHT) and all(cf.describe(a)["status"] == "RUNNING" for a in arns.values())
            versions = stack.deploy(release_n1)
            deployed.set()
            # N+1's changes to the same entities; to "a" at the effectiveAt of the one held before its fetch,
            # so that both apply in whichever order they reach v0 (the ratchet lets an equal time through)
            after = {f"n1-{e}": cf.start({"entityId": e, "operation": "put", "attributes": {"n1": e},
                                          "effectiveAt": T0 + (2_000 if e == "a" else 3_000), "changeId": f"n1-{e}"},
                                         name=f"n1-{e}")[1]
                     for e in ("a", "b", "c", "s")}
            results = {name: cf.wait(arn, 120) for name, arn in {**arns, **after}.items()}
        cf.sfn.redrive_execution(executionArn=failed.arn)  # after the deploy, the failure of release N
        results["n-failed"] = cf.wait(failed.arn, 120)
        arns["n-failed"] = failed.arn
        invoked = {name: _invoked(cf, arn) for name, arn in {**arns, **after}.items()}
        histories = {e: store.all_history(cf.dynamodb, cf.history_table, e) for e in ("a", "b", "c", "s", "d")}
        latest = {e: store.get_item(cf.dynamodb, cf.table, e, model.LATEST_SK) for e in histories}
        return versions, results, invoked, histories, latest, changes


def test_executions_in_flight_during_a_deploy_finish_on_the_release_they_started_with(tmp_path):
    versions, results, invoked, histories, latest, changes = _deploy_in_the_middle_of_traffic(tmp_path, True)

    # GIVEN release N's executions held before each step, WHEN release N+1 is deployed and runs beside them
    # THEN every one of them ends as release N ends it, having invoked release N's versions only
    assert {versions[f] for f in STEP_FUNCTIONS} == {"2"}
    for name, (_, _, outcome) in {**IN_FLIGHT, "n-failed": (None, None, "applied")}.items():
        assert results[name].status == "SUCCEEDED", (name, results[name].error, results[name].cause)
        assert results[name].output["outcome"] == outcome, name
        assert invoked[name] and all(arn.endswith(":1") for arn in invoked[name]), (name, invoked[name])
    for name in ("n1-a", "n1-b", "n1-c", "n1-s"):
        assert results[name].status == "SUCCEEDED" and results[name].output["outcome"] == "applied", name
        assert invoked[name] and all(arn.endswith(":2") for arn in invoked[name]), (name, invoked[name])
    # release N's tag step ran on its own version, which N+1's definition no longer names (issue 37.2: the
    # history step tags expiries): the function stays in the template for such executions
    assert any(arn.endswith(":function:changeflow-TagTtlFunction:1") for arn in invoked["n-tag"]), invoked["n-tag"]
    assert not any("TagTtlFunction" in arn for name in ("n1-a", "n1-b", "n1-c", "n1-s") for arn in invoked[name])

    # AND every change that was applied is in history exactly once, in version order, and v0 is the newest
    for entity, history in histories.items():
        numbers = [int(h[model.VERSION]) for h in history]
        assert sorted(numbers) == list(range(1, len(numbers) + 1)), (entity, numbers)
        assert int(latest[entity][model.VERSION]) == max(numbers)
    applied = [name for name, r in results.items() if r.output["outcome"] == "applied"] + ["n-before"]
    by_change = [h["changeId"] for history in histories.values() for h in history]
    assert sorted(by_change) == sorted(applied)
    assert "n-stale" not in by_change  # stale under release N: nothing written
    assert changes["n-stale"]["effectiveAt"] < T0 + 1_000


def test_without_published_versions_the_same_deploy_breaks_them(tmp_path):
    """The test above can fail: the same deploy with every ARN unqualified (the template before this
    change) moves release N's executions onto release N+1's handlers mid-way."""
    _, results, invoked, histories, _, _ = _deploy_in_the_middle_of_traffic(tmp_path, False)
    broken = {name for name in IN_FLIGHT if results[name].status != "SUCCEEDED"}
    assert broken, {name: results[name].status for name in IN_FLIGHT}
    assert results["n-failed"].status == "FAILED"  # its redrive ran release N+1's tag on N's payload
    assert all(":" not in arn.split(":function:")[1] for arn in invoked["n-fetch"])  # $LATEST
    by_change = {h["changeId"] for history in histories.values() for h in history}
    assert broken - {"n-stale"} - by_change  # a change accepted before the deploy never reached history


def _writers_named_across_a_deploy(tmp_path: Path, writers_pinned: bool) -> dict[str, set[str]]:
    """Release N is this checkout, N+1 the same with new writer code. Held while N+1 deploys: a put and a
    delete before their fetch, and a put in its back-off after a failed v0 write (its next fetch names the
    writer again). The function ARNs each execution invoked."""
    release_n = _release_tree(tmp_path / "n", None, True, writers_pinned)
    release_n1 = _release_tree(tmp_path / "n1", None, True, writers_pinned)
    for writer in ("update_latest", "delete_tombstone"):
        app = release_n1 / "functions" / writer / "app.py"
        app.write_text(app.read_text() + "\n# release N+1\n")
    with EmbeddedStack(release_n, time_scale=0.01) as stack:
        cf = Changeflow.for_embedded(stack)
        cf.submit({"entityId": "d", "operation": "put", "attributes": {"n": 0}, "effectiveAt": T0, "changeId": "d0"})
        deployed, held = threading.Event(), set()
        hold = {"put-fetch": "FetchLatestFunction", "delete-fetch": "FetchLatestFunction",
                "put-backoff": "UpdateLatestFunction"}

        def hold_before(function, event, invoke):
            name = (event.get("execution") or {}).get("name", "")
            if hold.get(name) == function.logical_id and name not in held:
                held.add(name)
                Holds.hold(name, lambda: deployed.wait(60))
                raise LambdaServiceError()
            return invoke()

        with fault_hook(stack.lambdas, hold_before):
            arns = {name: cf.start(change, name=name)[1] for name, change in {
                "put-fetch": {"entityId": "p", "operation": "put", "attributes": {"n": 1}, "effectiveAt": T0 + 1},
                "delete-fetch": {"entityId": "d", "operation": "delete", "effectiveAt": T0 + 2},
                "put-backoff": {"entityId": "q", "operation": "put", "attributes": {"n": 3}, "effectiveAt": T0 + 3},
            }.items()}
            for _ in range(3000):  # up to 30 s on a loaded machine
                if held == set(hold):
                    break
                threading.Event().wait(0.01)
            assert held == set(hold)
            stack.deploy(release_n1)
            deployed.set()
            arns["after"] = cf.start({"entityId": "r", "operation": "put", "attributes": {"n": 4},
                                      "effectiveAt": T0 + 4}, name="after")[1]
            results = {name: cf.wait(arn, 120) for name, arn in arns.items()}
        assert all(r.status == "SUCCEEDED" for r in results.values()), {n: r.error for n, r in results.items()}
        return {name: _invoked(cf, arn) for name, arn in arns.items()}


def test_the_fetch_step_names_the_writer_of_its_own_release(tmp_path):
    """GIVEN a deploy of new writer code while executions wait before their fetch or in their back-off,
    THEN the fetch (release N's version) names release N's writer, and a new execution N+1's."""
    invoked = _writers_named_across_a_deploy(tmp_path / "pinned", True)
    writers = {name: {arn for arn in arns if "UpdateLatest" in arn or "DeleteTombstone" in arn}
               for name, arns in invoked.items()}
    for name in ("put-fetch", "delete-fetch", "put-backoff"):
        assert writers[name] and all(arn.endswith(":1") for arn in writers[name]), (name, writers[name])
    assert writers["after"] and all(arn.endswith(":2") for arn in writers["after"]), writers["after"]

    # the test can fail: with the writers' ARNs unqualified, release N's fetch names $LATEST (N+1's code)
    invoked = _writers_named_across_a_deploy(tmp_path / "unpinned", False)
    unpinned = {arn for arn in invoked["put-fetch"] if "UpdateLatest" in arn}
    assert unpinned and all(arn.endswith("UpdateLatestFunction") for arn in unpinned), unpinned


def test_the_fetch_step_takes_the_writers_the_definition_names_else_its_environment():
    from changeflow_core import steps

    environment = {model.PUT: "env-update", model.DELETE: "env-tombstone"}
    named = steps.writers_named({"writers": {"update": "fn:U:3", "tombstone": "fn:D:3"}}, environment)
    updates = (model.PUT, model.PATCH, model.ROLLBACK, model.REDACT, model.ADOPT)  # every operation but delete
    assert named == {**dict.fromkeys(updates, "fn:U:3"), model.DELETE: "fn:D:3"}
    direct = steps.writers_named({"request": {}}, environment)  # a direct invocation: the environment's
    assert direct == {**dict.fromkeys(updates, "env-update"), model.DELETE: "env-tombstone"}
