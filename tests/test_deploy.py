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
import os
import re
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from changeflow.client import Changeflow
from changeflow.local.embedded import EmbeddedStack
from changeflow.local.lambdas import LambdaServiceError, fault_hook
from changeflow.local.moto_patches.stepfunctions.clock import Holds
from changeflow_core import model, store
from changeflow_core.names import execution_name
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


# --- the envelope across a deploy, through every entry point (issue 33 item 4) ---------------------------------
def _through_the_api(stack, api, change: dict) -> str:
    """POST /changes through the stack's REST API (API Gateway's Lambda proxy): the execution it started."""
    from werkzeug.test import Client

    answer = Client(api).post(f"/{api.stage}/changes", data=json.dumps(change), content_type="application/json")
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return json.loads(answer.get_data(as_text=True))["executionArn"]


def _as_api_gateway(stack, function, change: dict) -> str:
    """What API Gateway hands a front function (``function``: a release's, invoked as the API would)."""
    event = json.loads((ROOT / "events" / "functions" / "submit_change.json").read_text())
    event["body"] = json.dumps(change)
    event["requestContext"].update(requestId=str(uuid.uuid4()), requestTimeEpoch=int(time.time() * 1000))
    payload, failed = stack.lambdas.invoke(function, event)
    assert not failed and payload["statusCode"] == 200, payload
    return json.loads(payload["body"])["executionArn"]


def _as_eventbridge(stack, function, change: dict) -> str:
    """What the rule hands the event function (template.yaml's InputTransformer), for a new event."""
    delivered = json.loads((ROOT / "events" / "functions" / "receive_event.json").read_text())
    delivered["request"] = {"request": json.dumps(change)}
    delivered["event"]["id"] = str(uuid.uuid4())
    now = time.time()  # to the millisecond: a second's rounding made it older than the change before it (stale)
    delivered["receivedAt"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"
    payload, failed = stack.lambdas.invoke(function, delivered)
    assert not failed, payload
    return payload["executionArn"]


def _next_envelope_release(path: Path) -> Path:
    """This checkout as the next release would be if it changed the envelope: format 3, with a field of its own
    that the entry points seal (what a release may add without a two-phase rollout)."""
    release = _release_tree(path, None, True)
    module = release / "layers" / "core" / "changeflow_core" / "principal.py"
    text = module.read_text()
    for old, new in (("ENVELOPE_VERSION = 2", "ENVELOPE_VERSION = 3"),
                     ("FIELDS_OF_VERSION = {1: {REQUEST, FIELD, RECEIVED_AT}, ",
                      "FIELDS_OF_VERSION = {3: {VERSION, REQUEST, FIELD, RECEIVED_AT, NAME, SEAL, \"origin\"}, "
                      "1: {REQUEST, FIELD, RECEIVED_AT}, "),
                     ("    value = {VERSION: ENVELOPE_VERSION, **envelope(request, principal, received_at), NAME: name}",
                      "    value = {VERSION: ENVELOPE_VERSION, **envelope(request, principal, received_at), NAME: name, "
                      "\"origin\": \"release N+1\"}")):
        assert old in text, old
        text = text.replace(old, new)
    module.write_text(text)
    return release


def test_a_new_envelope_format_works_both_ways_across_a_deploy_through_the_api_and_eventbridge(tmp_path):
    """Release N+1 writes envelope format 3 (a new sealed field). While the update runs, N's entry points meet
    N+1's machine (CloudFormation updates the machine before the functions that name it) and N+1's meet N's
    (UpdateStateMachine: executions started just after an update may still use the previous definition).
    Every change, started through the API, through EventBridge, or as either release's entry point hands it
    on, is applied with the principal its entry point authenticated."""
    from changeflow.local.apigateway.rest_api import RestApi
    from changeflow.local.template import Template

    release_n = _release_tree(tmp_path / "n", None, True)
    release_n1 = _next_envelope_release(tmp_path / "n1")

    def change(entity: str, change_id: str) -> dict:
        return {"entityId": entity, "operation": "put", "changeId": change_id, "attributes": {}}

    with EmbeddedStack(release_n, time_scale=0.01) as stack:
        cf = Changeflow.for_embedded(stack)

        def settled(arn: str) -> str:  # one change of an entity at a time: their order is their effectiveAt's
            cf.wait(arn, 60)
            return arn

        api = RestApi(stack, "ChangeApi", insecure=True)
        started = {"api on N": settled(_through_the_api(stack, api, change("api", "n"))),
                   "events on N": settled(cf.submit_via_events(change("ev", "n")).arn)}
        # release N+1's entry points, as they run once updated, before the machine is (its definition lags)
        n1 = Template(release_n1 / "template.yaml", stack.template.stack_name, stack.region,
                      physical=stack.template.physical)
        front_n1, events_n1 = (stack._function_of(n1, release_n1, lid) for lid in
                               ("SubmitChangeFunction", "ReceiveChangeEventFunction"))
        started["N+1's front on N"] = settled(_as_api_gateway(stack, front_n1, change("api", "n1-front-on-n")))
        started["N+1's event function on N"] = settled(_as_eventbridge(stack, events_n1, change("ev", "n1-on-n")))
        front_n, events_n = stack.function("SubmitChangeFunction"), stack.function("ReceiveChangeEventFunction")
        stack.deploy(release_n1)
        # release N's entry points, still running until CloudFormation updates them, meet N+1's machine
        started["N's front on N+1"] = settled(_as_api_gateway(stack, front_n, change("api", "n-front-on-n1")))
        started["N's event function on N+1"] = settled(_as_eventbridge(stack, events_n, change("ev", "n-on-n1")))
        started["api on N+1"] = settled(_through_the_api(stack, api, change("api", "n1")))
        started["events on N+1"] = settled(cf.submit_via_events(change("ev", "n1")).arn)
        results = {name: cf.wait(arn, 60) for name, arn in started.items()}
        assert all(r.status == "SUCCEEDED" and r.output["outcome"] == "applied" for r in results.values()), str({
            name: (r.status, r.error, r.cause, r.output) for name, r in results.items()
            if r.status != "SUCCEEDED" or r.output["outcome"] != "applied"})
        # THEN each version records its entry point's principal, whichever release sealed or read it
        api_versions, event_versions = cf.entity("api")["versions"], cf.entity("ev")["versions"]
        assert [v["changeId"] for v in api_versions] == ["n", "n1-front-on-n", "n-front-on-n1", "n1"]
        assert {v["principal"]["via"] for v in api_versions} == {"api"}
        assert [v["changeId"] for v in event_versions] == ["n", "n1-on-n", "n-on-n1", "n1"]
        assert {(v["principal"]["via"], v["principal"]["account"]) for v in event_versions} == {("events", "123456789012")}
        # the newer format's own field was sealed by N+1 and ignored by N (which records what it knows)
        started_input = cf.sfn.describe_execution(executionArn=started["N+1's front on N"])["input"]
        assert json.loads(started_input)["v"] == 3 and json.loads(started_input)["origin"] == "release N+1"


BEFORE_THE_SEAL = "080108f"  # the last release whose entry points did not seal (issue 33)


def test_the_first_deploy_of_the_seal_refuses_unsealed_changes_by_name_and_a_resend_applies_them(tmp_path):
    """From a release before the seal there is no way for both to work: the old machine refuses every field it
    does not know (the seal), and the new one must refuse an api principal without a seal (that is what it
    stops). So the first update fails closed both ways, by name, writing nothing, and the client's resend
    (the front function retries a failed change as a new attempt) is applied."""
    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{BEFORE_THE_SEAL}^{{commit}}"]).returncode:
        pytest.skip(f"release {BEFORE_THE_SEAL} is not in this clone's history (a shallow clone)")
    old = tmp_path / "old"
    old.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", BEFORE_THE_SEAL, "layers"], capture_output=True,
                             check=True).stdout
    tarfile.open(fileobj=io.BytesIO(archive)).extractall(old, filter="data")
    # N+1's sealed envelope on N's machine: N's fetch step (its own principal module) refuses it by name
    from changeflow_core import principal, seal
    from changeflow_core.errors import ValidationError

    sealed = principal.sealed_envelope(seal.Key(b"k" * 32), json.dumps({"entityId": "e"}), {"via": "api", "arn": "a"},
                                       None, "name")
    script = ("import json, sys\nfrom changeflow_core import principal\ntry:\n"
              "    principal.unwrap(json.loads(sys.argv[1]))\nexcept Exception as e:\n"
              "    print(type(e).__name__, e)\n")
    ran = subprocess.run([sys.executable, "-c", script, json.dumps(sealed)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(old / "layers" / "core")}, timeout=60)
    assert ran.stdout.startswith("ValidationError name: is not a field of the execution input"), ran.stdout + ran.stderr
    # N's front function on N+1's machine: through this release's own fetch step, refused by name
    with EmbeddedStack(ROOT, time_scale=0.01) as stack:
        cf = Changeflow.for_embedded(stack)
        unsealed = {"request": json.dumps({"entityId": "first", "operation": "put", "changeId": "c1", "attributes": {}}),
                    "principal": {"via": "api", "arn": "arn:aws:iam::123456789012:user/alice"},
                    "receivedAt": int(time.time() * 1000)}
        arn = cf.sfn.start_execution(stateMachineArn=cf.state_machine_arn, name=execution_name("first", "c1"),
                                     input=json.dumps(unsealed))["executionArn"]
        refused = cf.wait(arn, 60)
        assert refused.error == "ValidationError" and json.loads(refused.cause)["errorMessage"].startswith("seal: ")
        assert cf.entity("first")["versions"] == []
        # the client's resend through the updated front function: a new attempt, sealed, applied
        resent = _as_api_gateway(stack, stack.function("SubmitChangeFunction"),
                                 {"entityId": "first", "operation": "put", "changeId": "c1", "attributes": {}})
        assert resent.endswith("-r2") and cf.wait(resent, 60).output["outcome"] == "applied"
    with pytest.raises(ValidationError):
        principal.unwrap(unsealed, "x", seal.Key(b"k" * 32))
