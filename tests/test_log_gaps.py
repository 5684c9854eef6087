"""The execution log is best-effort and cuts an input or output past 248 KB escaped
(https://docs.aws.amazon.com/step-functions/latest/dg/cw-logs.html; the embedded stack cuts as AWS does,
tests/test_parity.py). Everything that reads it (the archive of aged-out executions, Express history,
``verify --executions``, the console, the HistoryWriteFailed metric filter) handles a cut or missing event:
no crash, no RUNNING for an execution that has ended, and it says what the log lacks (issue 27.6). The
changes run on the real ASL."""

from __future__ import annotations

import json
import re
import time

import pytest

from changeflow.audit import executions
from changeflow.client import Changeflow
from changeflow.local.lambdas import fault_hook
from changeflow.local.template import Template
from conftest import LOGGED, ROOT
from test_archive import AgedOut

T0 = 1_767_225_600_000
QUOTES = 38_000  # a 76 KB put of quotes, accepted: its input escapes past 248 KB in the log


def big_put(entity: str = "big#1", change: str = "c1") -> dict:
    return {"entityId": entity, "operation": "put", "attributes": {"q": '"' * QUOTES}, "effectiveAt": T0,
            "changeId": change}


def log_records(cf, arn: str) -> list[dict]:
    return cf._log_records(arn)


# What this file reads is the execution log with its data (conftest.LOGGED), which an Express deployment
# needs for its history and an aged-out Standard execution for its input and output.


@pytest.fixture
def stack(make_stack):
    return make_stack(**LOGGED)


@pytest.fixture
def losing(monkeypatch):
    """CloudWatch Logs delivery losing every event of the given types (best-effort delivery)."""
    from moto.stepfunctions.parser.asl.eval.event import logging as sfn_logging

    session_class = sfn_logging.CloudWatchLoggingSession

    def lose(*types: str):
        deliver = session_class.publish_history_log

        def publish(self, history_log):
            if str(getattr(history_log["type"], "value", history_log["type"])) not in types:
                deliver(self, history_log)
        monkeypatch.setattr(session_class, "publish_history_log", publish)
    return lose


# --- a cut input -------------------------------------------------------------------------------------
def test_an_aged_out_execution_whose_input_the_log_cut_is_read_back_and_says_so(stack, cf):
    # GIVEN an accepted put whose input the log cut, aged out of Step Functions
    execution = cf.submit(big_put())
    assert execution.status == "SUCCEEDED"
    started = log_records(cf, execution.arn)[0]
    assert started["type"] == "ExecutionStarted" and started["details"]["inputDetails"]["truncated"] is True
    cf.sfn = AgedOut(cf.sfn, {execution.arn})
    # THEN the archive gives its status and output, and says the input was cut
    described = cf.describe(execution.arn)
    assert described["status"] == "SUCCEEDED" and json.loads(described["output"]) == execution.output
    assert described["inputDetails"]["truncated"] is True
    assert described["logGaps"] == ["the log cut the execution's input at 248 KB (escaped)"]
    events = list(cf.history(execution.arn))
    assert events[0]["executionStartedEventDetails"]["inputDetails"]["truncated"] is True
    from changeflow import report

    assert "(cut at 248 KB by the execution log)" in report.history(events)  # changeflow history says so
    # and verify --executions vouches for the version from the log (it said "does not exist" past 90 days)
    assert executions.check_executions(cf, "big#1") == []


def test_the_console_shows_an_execution_the_log_cut_and_says_what_it_lacks(stack, cf):
    from werkzeug.test import Client

    from changeflow.console import data
    from changeflow.console.app import Console

    execution = cf.submit(big_put())
    cf.sfn = AgedOut(cf.sfn, {execution.arn})
    browser = Client(Console(data.Reader(cf)))
    page = browser.get("/console/execution", query_string={"name": execution.name})
    html = page.get_data(as_text=True)
    assert page.status_code == 200
    assert 'id="log-gaps"' in html and "the log cut the execution&#39;s input at 248 KB" in html
    assert "cut at 248 KB by the execution log" in html  # the events the log cut are tagged
    assert browser.get("/console/executions").status_code == 200


@pytest.mark.parametrize("entry", ["start", "events"])
def test_on_express_a_change_whose_input_the_log_cut_is_found_and_reported(make_stack, entry):
    # Express's only history is its log: submitting through EventBridge finds the execution by its input,
    # which the log cut (json.loads of the cut text raised)
    cf = Changeflow.for_embedded(make_stack(WorkflowType="EXPRESS", **LOGGED))
    execution = cf.submit(big_put()) if entry == "start" else cf.submit_via_events(big_put(), timeout=60)
    assert execution.status == "SUCCEEDED" and execution.output["version"] == 1
    assert cf.describe(execution.arn)["logGaps"] == ["the log cut the execution's input at 248 KB (escaped)"]
    assert [e["status"] for e in cf.executions()] == ["SUCCEEDED"]
    assert executions.check_executions(cf, "big#1") == []


# --- a lost event ------------------------------------------------------------------------------------
def test_an_aged_out_execution_whose_end_the_log_lost_is_unknown_not_running(stack, cf, losing):
    cf.submit({"entityId": "e", "operation": "put", "attributes": {"a": 1}, "effectiveAt": T0, "changeId": "c0"})
    losing("ExecutionSucceeded")
    execution = cf.submit({"entityId": "e", "operation": "put", "attributes": {"a": 2}, "effectiveAt": T0 + 1,
                           "changeId": "c1"})
    assert execution.status == "SUCCEEDED"  # Step Functions knows; only the log lost the event
    cf.sfn = AgedOut(cf.sfn, {execution.arn})
    described = cf.describe(execution.arn)
    assert described["status"] == "UNKNOWN" and "output" not in described
    assert described["logGaps"] == ["the log has no event that ends the execution: its outcome is unknown"]
    # verify --executions cannot vouch for version 2 and says why, rather than passing it or calling it forged
    assert executions.check_executions(cf, "e") == [
        "version 2: cannot be vouched for: the log has no event that ends the execution: its outcome is unknown"]


def test_an_aged_out_execution_whose_start_the_log_lost_is_read_without_its_input(stack, cf, losing):
    losing("ExecutionStarted")
    execution = cf.submit(big_put())
    cf.sfn = AgedOut(cf.sfn, {execution.arn})
    described = cf.describe(execution.arn)
    assert described["status"] == "SUCCEEDED" and described.get("input") is None
    assert described["logGaps"] == ["the log has no ExecutionStarted event: the execution's input is unknown"]
    assert executions.check_executions(cf, "big#1") == []


def test_an_express_execution_whose_end_the_log_lost_is_running_for_its_5_minutes_then_unknown(
        make_stack, losing, monkeypatch):
    cf = Changeflow.for_embedded(make_stack(WorkflowType="EXPRESS", **LOGGED))
    losing("ExecutionSucceeded", "ExecutionFailed")
    name, arn = cf.start(big_put())
    from changeflow.local.moto_patches.stepfunctions.termination import wait_for_termination
    assert wait_for_termination(arn, 30)
    assert cf.describe(arn)["status"] == "RUNNING"  # the log may still deliver its end
    from changeflow.client import logged

    later = time.time() + logged.EXPRESS_LIMIT_S + logged.DELIVERY_GRACE_S + 1
    monkeypatch.setattr(logged.time, "time", lambda: later)
    assert cf.describe(arn)["status"] == "UNKNOWN"
    assert cf.wait(arn, timeout=5).status == "UNKNOWN"  # wait ends: the execution cannot be running


def test_an_express_execution_whose_start_the_log_lost_is_still_listed(make_stack, losing):
    cf = Changeflow.for_embedded(make_stack(WorkflowType="EXPRESS", **LOGGED))
    cf.submit({"entityId": "e", "operation": "put", "attributes": {"a": 1}, "effectiveAt": T0, "changeId": "c0"})
    losing("ExecutionStarted")
    lost = cf.submit({"entityId": "e", "operation": "put", "attributes": {"a": 2}, "effectiveAt": T0 + 1,
                      "changeId": "c1"})
    assert lost.status == "SUCCEEDED" and lost.output["version"] == 2
    listed = {e["executionArn"]: e["status"] for e in cf.executions()}
    assert listed[lost.arn] == "SUCCEEDED" and len(listed) == 2


# --- the HistoryWriteFailed metric filter --------------------------------------------------------------
def _filter_matches(pattern: str, record: dict) -> bool:
    from test_observability import json_pattern_matches

    return json_pattern_matches(pattern, record)


def test_the_history_write_failed_filter_matches_an_execution_whose_input_the_log_cut(stack, cf):
    # the filter reads $.type and $.details.error, which the log never cuts (only input and output)
    def broken(function, event, invoke):
        if function.logical_id == "PutHistoryFunction":
            raise RuntimeError("history table unavailable")
        return invoke()

    with fault_hook(stack.lambdas, broken):
        failed = cf.submit(big_put())
    assert failed.error == "HistoryWriteFailed"
    records = log_records(cf, failed.arn)
    assert records[0]["details"]["inputDetails"]["truncated"] is True
    template = Template(ROOT / "template.yaml")
    [pattern] = [spec["Properties"]["FilterPattern"] for spec in template.of_type("AWS::Logs::MetricFilter").values()
                 if "HistoryWriteFailed" in spec["Properties"]["FilterPattern"]]
    assert not re.search(r"\$\.details\.(input|output)", pattern)
    assert [r["type"] for r in records if _filter_matches(pattern, r)] == ["ExecutionFailed"]


def test_a_lost_history_write_failed_event_still_pages_through_the_failed_executions_alarm():
    # the log may lose the event the filter counts; AWS/States' ExecutionsFailed is Step Functions' own
    # metric, not read from the log, and its alarm fires for every failed execution
    template = Template(ROOT / "template.yaml")
    alarms = [spec["Properties"] for spec in template.of_type("AWS::CloudWatch::Alarm").values()]

    def metrics(alarm):  # a plain alarm's metric, or each MetricStat of a metric-math alarm
        yield alarm.get("Namespace"), alarm.get("MetricName")
        for query in alarm.get("Metrics", []):
            metric = query.get("MetricStat", {}).get("Metric", {})
            yield metric.get("Namespace"), metric.get("MetricName")

    from_step_functions = [a for a in alarms if ("AWS/States", "ExecutionsFailed") in set(metrics(a))]
    assert from_step_functions and all(a.get("AlarmActions") for a in from_step_functions)
    # what the log can lose only ever adds to the count: the math subtracts client errors counted from the log
    # (ExecutionsFailedByClient), so a lost event leaves a system failure in the difference
    for alarm in from_step_functions:
        expressions = [q["Expression"] for q in alarm.get("Metrics", []) if "Expression" in q]
        assert all("+" not in e for e in expressions), expressions
