"""RedriveExecution on the embedded stack (moto 5.2.5 has none: changeflow.local.moto_patches.stepfunctions.redrive),
as AWS documents it: a Standard execution that did not succeed continues from its unsuccessful step with that
step's input, on the definition it started with, under the same ARN; the successful steps are not rerun and
their history is kept; the history goes on with ExecutionRedriven.
https://docs.aws.amazon.com/step-functions/latest/apireference/API_RedriveExecution.html
https://docs.aws.amazon.com/step-functions/latest/dg/redrive-executions.html"""

from __future__ import annotations

import json

from test_parity import error_code, machine, run

from changeflow.local.moto_patches.stepfunctions.termination import wait_for_termination


def _definition(table: str) -> dict:
    """A Pass step, then a conditional put that fails (uncaught) while the item exists."""
    return {"StartAt": "Prepare", "States": {
        "Prepare": {"Type": "Pass", "Parameters": {"id.$": "$.id", "prepared": True}, "Next": "Put once"},
        "Put once": {
            "Type": "Task", "Resource": "arn:aws:states:::dynamodb:putItem",
            "Parameters": {"TableName": table,
                           "Item": {"pk": {"S.$": "$.id"}, "sk": {"S": "redrive"},
                                    "redrives": {"N.$": "States.Format('{}', $$.Execution.RedriveCount)"}},
                           "ConditionExpression": "attribute_not_exists(pk)"},
            "ResultPath": None, "End": True}}}


def test_a_redrive_reruns_the_unsuccessful_step_only_with_its_input_on_the_same_definition(stack):
    sfn, dynamodb = stack.client("stepfunctions"), stack.client("dynamodb")
    table = stack.outputs["ChangeTableName"]
    key = {"pk": {"S": "redriven"}, "sk": {"S": "redrive"}}
    dynamodb.put_item(TableName=table, Item=key)  # GIVEN the put's condition fails
    arn = machine(stack, _definition(table))
    execution = run(stack, arn, {"id": "redriven"})
    first = sfn.get_execution_history(executionArn=execution, maxResults=1000)["events"]
    assert sfn.describe_execution(executionArn=execution)["status"] == "FAILED"

    # WHEN the cause is removed, the machine's definition changes, and the execution is redriven
    dynamodb.delete_item(TableName=table, Key=key)
    sfn.update_state_machine(stateMachineArn=arn, definition=json.dumps(
        {"StartAt": "Prepare", "States": {"Prepare": {"Type": "Fail", "Error": "NewDefinition"}}}))
    sfn.redrive_execution(executionArn=execution)
    assert wait_for_termination(execution, 30)

    # THEN it succeeds on its own definition, having rerun the put alone, with the input it had
    described = sfn.describe_execution(executionArn=execution)
    assert described["status"] == "SUCCEEDED" and described["redriveCount"] == 1 and described["redriveDate"]
    events = sfn.get_execution_history(executionArn=execution, maxResults=1000)["events"]
    assert events[:len(first)] == first and [e["id"] for e in events] == list(range(1, len(events) + 1))
    after = events[len(first):]
    assert after[0]["type"] == "ExecutionRedriven" and after[0]["executionRedrivenEventDetails"] == {"redriveCount": 1}
    assert [e["type"] for e in events].count("PassStateEntered") == 1  # the successful step is not rerun
    entered = [json.loads(e["stateEnteredEventDetails"]["input"]) for e in events
               if e["type"] == "TaskStateEntered"]
    assert entered == [{"id": "redriven", "prepared": True}] * 2
    item = dynamodb.get_item(TableName=table, Key=key)["Item"]
    assert item["redrives"] == {"N": "1"}  # $$.Execution.RedriveCount


def test_only_an_execution_that_did_not_succeed_can_be_redriven(stack):
    sfn = stack.client("stepfunctions")
    passing = {"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}
    succeeded = run(stack, machine(stack, passing), name="succeeded")
    assert error_code(lambda: sfn.redrive_execution(executionArn=succeeded)) == "ExecutionNotRedrivable"
    express = run(stack, machine(stack, {"StartAt": "Fail", "States": {"Fail": {"Type": "Fail"}}}, "EXPRESS"),
                  name="express")
    assert error_code(lambda: sfn.redrive_execution(executionArn=express)) in ("ExecutionNotRedrivable", "InvalidArn")
