"""Execution histories past Step Functions' 90 days: the state machine's execution log (with the
operator's opt-in, level ALL with execution data, in a log group kept ExecutionLogRetentionDays) is the
archive. Once Step Functions no
longer has an execution, ``changeflow history``, the client and so the console read it from the log, and
what they read is the history the execution had."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from changeflow.checks.faults import Injector
from conftest import LOGGED

T0 = 1_767_225_600_000


def put(at: int, change: str, **attributes) -> dict:
    return {"entityId": "doc#archive", "operation": "put", "attributes": attributes or {"n": 1}, "effectiveAt": at,
            "changeId": change}


def comparable(events: list[dict]) -> list[tuple]:
    """An event as an auditor reads it: its type and its details (state, input, output, error, cause)."""
    out = []
    for event in events:
        details = next((v for k, v in event.items() if k.endswith("EventDetails")), {})
        out.append((event["type"], event["id"], json.dumps(details, sort_keys=True)))
    return out


class AgedOut:
    """Step Functions after 90 days: the execution is gone from DescribeExecution and GetExecutionHistory."""

    def __init__(self, sfn, gone: set[str]):
        self._sfn, self._gone = sfn, gone
        self.exceptions = sfn.exceptions

    def __getattr__(self, name):
        return getattr(self._sfn, name)

    def _refuse(self, arn):
        raise self._sfn.exceptions.ExecutionDoesNotExist(
            {"Error": {"Code": "ExecutionDoesNotExist", "Message": f"Execution Does Not Exist: '{arn}'"}},
            "GetExecutionHistory")

    def get_execution_history(self, **kwargs):
        if kwargs["executionArn"] in self._gone:
            self._refuse(kwargs["executionArn"])
        return self._sfn.get_execution_history(**kwargs)

    def describe_execution(self, **kwargs):
        if kwargs["executionArn"] in self._gone:
            self._refuse(kwargs["executionArn"])
        return self._sfn.describe_execution(**kwargs)


@pytest.fixture
def stack(make_stack):
    """The operator's opt-in (docs/privacy.md): every state, with its input and output, in the log."""
    return make_stack(**LOGGED)


@pytest.fixture
def cf(stack):
    from changeflow.client import Changeflow

    return Changeflow.for_embedded(stack)


def test_an_aged_out_execution_with_retries_and_a_failure_is_read_back_from_the_execution_log(stack, cf):
    # GIVEN an execution whose history put was retried twice, and one that failed by name
    with Injector().around(stack.lambdas, [("PutHistoryFunction", "service", 2)]):
        retried = cf.submit(put(T0, "c1"))
    failed = cf.submit({"entityId": "doc#archive", "operation": "rollback", "toVersion": 9, "changeId": "c2"})
    assert retried.status == "SUCCEEDED" and failed.error == "NotFound"
    before = {e.arn: list(cf.history(e.arn)) for e in (retried, failed)}
    assert sum(1 for e in before[retried.arn] if e["type"] == "TaskFailed") == 2
    # WHEN Step Functions no longer has them
    cf.sfn = AgedOut(cf.sfn, set(before))
    with pytest.raises(ClientError):
        cf.sfn.get_execution_history(executionArn=retried.arn)
    # THEN the client reads each history from the execution log: the same events, in order
    for arn, events in before.items():
        assert comparable(list(cf.history(arn))) == comparable(events)
    assert cf.describe(failed.arn)["error"] == "NotFound" and cf.describe(retried.arn)["status"] == "SUCCEEDED"


def test_history_of_an_execution_that_never_existed_is_still_not_found(stack, cf):
    cf.sfn = AgedOut(cf.sfn, set())
    arn = cf.state_machine_arn.replace(":stateMachine:", ":execution:") + ":never"
    with pytest.raises(ClientError):
        list(cf.history(arn))


def test_the_execution_log_is_kept_longer_than_step_functions_keeps_histories():
    from changeflow.local.template import Template

    from conftest import ROOT

    template = Template(ROOT / "template.yaml")
    group = template.resources["ChangeStateMachineLogGroup"]["Properties"]
    assert group["RetentionInDays"] == {"Ref": "ExecutionLogRetentionDays"}
    parameter = template.body["Parameters"]["ExecutionLogRetentionDays"]
    assert int(parameter["Default"]) > 90 and min(int(v) for v in parameter["AllowedValues"]) >= 90
    logging = template.resources["ChangeStateMachine"]["Properties"]["Logging"]
    assert logging["IncludeExecutionData"] == {"Ref": "StateMachineIncludeExecutionData"}


def test_by_default_an_aged_out_execution_is_shown_from_the_versions_it_wrote(make_stack):
    """With the default log (failures only, no data: docs/privacy.md) a succeeded execution is not in the
    log; once Step Functions forgets it, the client, the CLI and the console show what the table keeps."""
    from changeflow import report
    from changeflow.client import Changeflow
    from changeflow.console.data import Reader

    # GIVEN a put and a patch on the default stack, both aged out of Step Functions
    cf = Changeflow.for_embedded(make_stack())
    entity, secret = "doc#aged", "content-that-stays-in-the-table"
    put_run = cf.submit({"entityId": entity, "operation": "put", "changeId": "c1", "effectiveAt": T0,
                         "attributes": {"s": secret}, "actor": "alice", "reason": "onboarding"})
    patch_run = cf.submit({"entityId": entity, "operation": "patch", "changeId": "c2", "effectiveAt": T0 + 1,
                           "set": {"t": 1}})
    assert (put_run.status, patch_run.status) == ("SUCCEEDED", "SUCCEEDED")
    cf.sfn = AgedOut(cf.sfn, {put_run.arn, patch_run.arn})
    # WHEN it is described without its entity THEN it is gone, as before
    with pytest.raises(ClientError):
        cf.describe(put_run.arn)
    # WHEN with its entity THEN its name and the version it wrote, with their audit fields, and no content
    aged = cf.describe(put_run.arn, entity)
    assert aged["status"] == "AGED_OUT" and aged["name"] == put_run.name
    assert [(v["version"], v["changeId"], v["operation"], v["actor"], v["reason"]) for v in aged["versions"]] == [
        (1, "c1", "put", "alice", "onboarding")]
    assert secret not in json.dumps(aged, default=str)
    assert "AGED_OUT" in report.aged_out(aged) and "alice" in report.aged_out(aged)
    # and the console's entity page says each version's execution applied it
    reader = Reader(cf)
    assert reader.outcome(patch_run.arn, entity) == ("applied", "AGED_OUT")
    assert reader.outcome(patch_run.arn) == (None, None)
    # whichever page is opened first: a look without the entity does not hide the execution from one with it
    fresh = Reader(cf)
    assert fresh.outcome(put_run.arn) == (None, None)
    assert fresh.describe(put_run.arn, entity)["status"] == "AGED_OUT"


def test_changeflow_history_shows_an_aged_out_execution_from_the_versions_given_its_entity(make_stack, monkeypatch,
                                                                                           capsys):
    from changeflow.cli import main
    from changeflow.client import Changeflow, targets

    cf = Changeflow.for_embedded(make_stack())
    done = cf.submit({"entityId": "doc#cli", "operation": "put", "changeId": "c1", "effectiveAt": T0,
                      "attributes": {"s": "kept-in-the-table"}, "actor": "bob"})
    cf.sfn = AgedOut(cf.sfn, {done.arn})
    monkeypatch.setattr(targets, "client_for", lambda args: cf)
    capsys.readouterr()
    # WHEN asked without the entity THEN no such execution (exit 1), as before
    assert main(["history", done.name]) == 1
    capsys.readouterr()
    # WHEN asked with it THEN its name, AGED_OUT and the version it wrote, no content
    assert main(["history", done.name, "--entity", "doc#cli"]) == 0
    out = capsys.readouterr().out
    assert done.name in out and "AGED_OUT" in out and "bob" in out and "kept-in-the-table" not in out
    assert main(["history", done.name, "--entity", "doc#cli", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["versions"][0]["version"] == 1


@pytest.mark.parametrize("parameters", [{}, {"StateMachineLogLevel": "ALL"}], ids=["default log", "ALL, no data"])
def test_verify_executions_never_calls_an_aged_out_version_forged_when_the_log_keeps_no_data(make_stack, parameters):
    # GIVEN a version whose execution aged out of Step Functions, on a stack whose log keeps no data (the
    # default ERROR keeps failures only; ALL without data keeps no output) THEN verify --executions cannot
    # vouch for it, and says so, rather than reporting what the execution "reports"
    from changeflow.audit.executions import check_executions
    from changeflow.client import Changeflow

    cf = Changeflow.for_embedded(make_stack(**parameters))
    done = cf.submit({"entityId": "aged#1", "operation": "put", "changeId": "c1", "attributes": {"a": 1}})
    assert done.status == "SUCCEEDED"
    cf.sfn = AgedOut(cf.sfn, {done.arn})
    problems = check_executions(cf, "aged#1")
    assert len(problems) == 1 and problems[0].startswith("version 1: cannot be vouched for"), problems
    assert "reports" not in problems[0]
