"""Security, checked by tools that are not ours (src/changeflow/checks/security.py, `make lint`): the template
passes every check but the skipped ones, and each check bites - a copy of the template with one bad
change makes the tool that should notice it report it. The tools are installed by `make setup`; a
missing one fails here (it is never skipped)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from changeflow.checks import security
from changeflow.checks.security import (CFN_LINT, CHECKOV, CONTROL_TOWER, PROJECT_GUARD, SAM_VALIDATE, SERVERLESS, SKIPPED,
                                 Finding, Skip, Tools)
from conftest import ROOT

TEMPLATE = (ROOT / "template.yaml").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def tools():
    found = Tools(ROOT)
    try:
        found.check_installed()
    except security.ToolMissing as exc:
        pytest.fail(str(exc))
    return found


def bad_copy(directory: Path, *edits: tuple[str, str]) -> Path:
    """template.yaml with each ``(old, new)`` edit (``old`` must occur exactly once), beside a copy of
    the state machine definition it points at."""
    text = TEMPLATE
    for old, new in edits:
        assert text.count(old) == 1, f"the edit must match once: {old!r}"
        text = text.replace(old, new)
    shutil.copytree(ROOT / "statemachines", directory / "statemachines")
    path = directory / "template.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def keys(findings: list[Finding]) -> set[tuple[str, str]]:
    return {(f.check, f.resource) for f in findings}


# --- the edits --------------------------------------------------------------------------------------------------
UPDATE_LATEST_POLICY = """              Action: [dynamodb:PutItem]
              Resource: !GetAtt ChangeTable.Arn

  PutHistoryFunction:"""
CHANGE_TABLE_PITR = """      PointInTimeRecoverySpecification:
        PointInTimeRecoveryEnabled: true
      DeletionProtectionEnabled: !Ref TableDeletionProtection
    DeletionPolicy: Retain
    UpdateReplacePolicy: Retain

  HistoryTable:"""
CHANGE_TABLE_SSE = """      SSESpecification:  # the AWS managed key (aws/dynamodb), or the KmsKeyArn parameter's
        SSEEnabled: true
        SSEType: !If [UseKmsKey, KMS, !Ref AWS::NoValue]
        KMSMasterKeyId: !If [UseKmsKey, !Ref KmsKeyArn, !Ref AWS::NoValue]
      PointInTimeRecoverySpecification:
        PointInTimeRecoveryEnabled: true
      DeletionProtectionEnabled: !Ref TableDeletionProtection
    DeletionPolicy: Retain
    UpdateReplacePolicy: Retain

  HistoryTable:"""
TAG_TTL_LOG_GROUP = """      LogGroupName: !Sub /aws/lambda/${TagTtlFunction}
      RetentionInDays: !Ref LogRetentionDays
"""
WILDCARD_POLICY = (UPDATE_LATEST_POLICY, UPDATE_LATEST_POLICY.replace("[dynamodb:PutItem]", '"dynamodb:*"'))
OPEN_API = ("        DefaultAuthorizer: AWS_IAM\n", "")
NO_RETENTION = (TAG_TTL_LOG_GROUP, TAG_TTL_LOG_GROUP.replace("      RetentionInDays: !Ref LogRetentionDays\n", ""))
NO_THROTTLING = ("""      MethodSettings:
        - ResourcePath: "/*"
          HttpMethod: "*"
          ThrottlingRateLimit: !Ref ApiThrottlingRateLimit
          ThrottlingBurstLimit: !Ref ApiThrottlingBurstLimit
""", "")
PITR_OFF = (CHANGE_TABLE_PITR, CHANGE_TABLE_PITR.replace("RecoveryEnabled: true", "RecoveryEnabled: false"))


# --- the template passes ------------------------------------------------------------------------------------------
def test_the_template_passes_every_check_but_the_skipped_ones(tools, tmp_path):
    result = security.run(build_dir=tmp_path / "build")
    report = [str(f) for f in result.findings]
    report += [f"unused skip: {s.tool} {s.check}" for s in result.unused_skips]
    report += [f"{step.name} on {step.target}: {step.error}" for step in result.errors]
    assert result.ok, "\n".join(report)
    assert {step.name for step in result.steps} == {CFN_LINT, SAM_VALIDATE, SERVERLESS, CHECKOV, CONTROL_TOWER,
                                                    PROJECT_GUARD}
    assert {(step.name, step.target) for step in result.steps if step.name == SERVERLESS} == {
        (SERVERLESS, "template.yaml"), (SERVERLESS, "cloudformation.json")}
    assert (tmp_path / "build" / "cloudformation.json").is_file()
    # Every skip is used: each covers a finding some tool really reports.
    assert {skip for _, skip in result.skipped} == set(SKIPPED)


def test_every_skip_has_a_one_line_reason_and_names_a_tool_that_runs():
    tools = {CFN_LINT, SAM_VALIDATE, SERVERLESS, CHECKOV, CONTROL_TOWER, PROJECT_GUARD}
    assert len({(s.tool, s.check) for s in SKIPPED}) == len(SKIPPED)
    for skip in SKIPPED:
        assert skip.tool in tools and skip.check and skip.reason.strip() and "\n" not in skip.reason, skip
        assert skip.tool not in (PROJECT_GUARD, CFN_LINT, SAM_VALIDATE), "our rules and cfn-lint are never skipped"
    table = security.skipped_table()
    assert all(f"`{skip.check}`" in table for skip in SKIPPED)


def test_a_skip_covers_only_its_tool_check_and_resources_and_an_unused_one_is_reported():
    vpc = Finding(CHECKOV, "CKV_AWS_117", "FetchLatestFunction", "vpc")
    cache = Finding(CHECKOV, "CKV_AWS_120", "ChangeApiStage", "cache")
    other_stage = Finding(CHECKOV, "CKV_AWS_120", "SomeOtherStage", "cache")
    same_id_other_tool = Finding(CONTROL_TOWER, "CKV_AWS_117", "FetchLatestFunction", "vpc")
    skips = (Skip(CHECKOV, "CKV_AWS_117", (), "r"), Skip(CHECKOV, "CKV_AWS_120", ("ChangeApiStage",), "r"),
             Skip(CHECKOV, "CKV_AWS_999", (), "r"))
    left, covered, unused = security.apply_skips([vpc, cache, other_stage, same_id_other_tool], skips)
    assert left == [other_stage, same_id_other_tool]
    assert [f for f, _ in covered] == [vpc, cache]
    assert unused == [skips[2]]


def test_a_missing_tool_says_to_run_make_setup(tmp_path):
    with pytest.raises(security.ToolMissing, match="make setup"):
        Tools(tmp_path).check_installed()


# --- each check bites ---------------------------------------------------------------------------------------------
GUARD_CASES = {
    "wildcard action": ([WILDCARD_POLICY],
                        {("no_wildcard_actions", "UpdateLatestFunction"),
                         ("function_dynamodb_actions", "UpdateLatestFunction")}),
    "wildcard resource": ([(UPDATE_LATEST_POLICY, UPDATE_LATEST_POLICY.replace("!GetAtt ChangeTable.Arn", '"*"'))],
                          {("no_wildcard_resources", "UpdateLatestFunction")}),
    "partial wildcard resource": (
        [(UPDATE_LATEST_POLICY, UPDATE_LATEST_POLICY.replace(
            "!GetAtt ChangeTable.Arn",
            "!Sub arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/*"))],
        {("no_wildcard_resources", "UpdateLatestFunction")}),
    "an action the function does not call": (
        [(UPDATE_LATEST_POLICY,
          UPDATE_LATEST_POLICY.replace("[dynamodb:PutItem]", "[dynamodb:PutItem, dynamodb:DeleteItem]"))],
        {("function_dynamodb_actions", "UpdateLatestFunction")}),
    "a wildcard resource for Step Functions": (
        [("              Action: [states:StartExecution]\n              Resource: !Ref ChangeStateMachine\n",
          "              Action: [states:StartExecution]\n              Resource: \"*\"\n")],
        {("no_wildcard_resources", "SubmitChangeFunction")}),
    "a wildcard action in a resource policy": (
        [("            Principal: {Service: events.amazonaws.com}\n            Action: sqs:SendMessage\n",
          "            Principal: {Service: events.amazonaws.com}\n            Action: sqs:*\n")],
        {("no_wildcard_actions", "ChangeEventsDeadLetterQueuePolicy")}),
    "NotAction": ([(UPDATE_LATEST_POLICY, UPDATE_LATEST_POLICY.replace("Action:", "NotAction:"))],
                  {("no_wildcard_actions", "UpdateLatestFunction")}),
    "the vended-log exception used for another action": (
        [("                - logs:DescribeLogGroups\n",
          "                - logs:DescribeLogGroups\n                - dynamodb:DeleteItem\n")],
        {("vended_log_exception_is_only_vended_log_delivery", "ChangeStateMachine")}),
    "a wildcard resource under another Sid": (
        [("- Sid: VendedLogDeliveryRequiresWildcardResource", "- Sid: LogDelivery")],
        {("no_wildcard_resources", "ChangeStateMachine")}),
    "a wildcard function in the step functions' invoke statement": (
        [("                - !Sub ${TagTtlFunction.Arn}:*\n",
          "                - !Sub arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:*\n")],
        {("invoke_versions_exception", "ChangeStateMachine")}),
    "a wildcard resource in the step functions' invoke statement": (
        [("                - !Sub ${TagTtlFunction.Arn}:*\n", '                - "*"\n')],
        {("invoke_versions_exception", "ChangeStateMachine")}),
    "another action in the step functions' invoke statement": (
        [("              Action: lambda:InvokeFunction\n", "              Action: [lambda:InvokeFunction, lambda:UpdateFunctionCode]\n")],
        {("invoke_versions_exception", "ChangeStateMachine")}),
    "a SAM policy template": (
        [("      Policies:\n        - Statement:\n            # The five step functions",
          "      Policies:\n        - LambdaInvokePolicy: {FunctionName: !Ref TagTtlFunction}\n"
          "        - Statement:\n            # The five step functions")],
        {("policies_are_inline_statements", "ChangeStateMachine")}),
    "open API": ([OPEN_API], {("api_requires_iam_authorization", "ChangeApi")}),
    "a route without authorization": (
        [('Properties: {RestApiId: !Ref ChangeApi, Path: "/entities/{id}", Method: get}',
          'Properties: {RestApiId: !Ref ChangeApi, Path: "/entities/{id}", Method: get, Auth: {Authorizer: NONE}}')],
        {("api_requires_iam_authorization", "ReadApiFunction")}),
    "PITR off": ([PITR_OFF], {("tables_encrypted_recoverable_protected", "ChangeTable")}),
    "SSE off": ([(CHANGE_TABLE_SSE, CHANGE_TABLE_SSE.replace("SSEEnabled: true", "SSEEnabled: false"))],
                {("tables_encrypted_recoverable_protected", "ChangeTable")}),
    "deletion protection not from the parameter": (
        [(CHANGE_TABLE_PITR, CHANGE_TABLE_PITR.replace("!Ref TableDeletionProtection", "false"))],
        {("tables_encrypted_recoverable_protected", "ChangeTable")}),
    "deletion protection off by default": (
        [('  TableDeletionProtection:\n    Type: String\n    Default: "true"',
          '  TableDeletionProtection:\n    Type: String\n    Default: "false"')],
        {("tables_encrypted_recoverable_protected", "")}),
    "log group without retention": ([NO_RETENTION], {("log_groups_have_retention_and_kms_option", "TagTtlLogGroup")}),
    "state machine logging may be turned off": (
        [("    AllowedValues: [ALL, ERROR]\n", '    AllowedValues: [ALL, ERROR, "OFF"]\n')],
        {("state_machine_logs_errors", "")}),
    "a function not traced": (
        [("      CodeUri: functions/tag_ttl/\n", "      CodeUri: functions/tag_ttl/\n      Tracing: PassThrough\n")],
        {("functions_traced", "TagTtlFunction")}),
    "tracing not on in Globals": ([("    Tracing: Active\n", "")], {("functions_traced", "")}),
    # issue 35: nothing may delete or unlock a digest, and the digest function only reads and puts objects
    "the digest function allowed to delete a digest": (
        [("              Action: [s3:GetObjectVersion, s3:PutObject]\n",
          "              Action: [s3:GetObjectVersion, s3:PutObject, s3:DeleteObjectVersion]\n")],
        {("digest_objects_exception", "DigestFunction"), ("nothing_deletes_or_unlocks_a_digest", "DigestFunction"),
         ("function_dynamodb_actions", "DigestFunction")}),
    "the digest function allowed to shorten a retention": (
        [("              Action: [s3:ListBucketVersions]\n",
          "              Action: [s3:ListBucketVersions, s3:PutObjectRetention, s3:PutBucketObjectLockConfiguration]\n")],
        {("nothing_deletes_or_unlocks_a_digest", "DigestFunction"), ("function_dynamodb_actions", "DigestFunction")}),
    "the digests' objects statement widened to the bucket": (
        [("                - ${Bucket}/${AWS::StackName}/digests/*\n", "                - ${Bucket}/*\n")],
        {("digest_objects_exception", "DigestFunction")}),
    "the digest function allowed to write the table": (
        [("              Action: [dynamodb:BatchGetItem, dynamodb:Scan]\n",
          "              Action: [dynamodb:BatchGetItem, dynamodb:Scan, dynamodb:PutItem]\n")],
        {("function_dynamodb_actions", "DigestFunction")}),
    "a function without a reviewed action list": (
        [("  ReadApiFunction:\n", "  ReadApiFunction2:\n")],
        {("every_function_has_a_reviewed_action_list", "ReadApiFunction2")}),
}


@pytest.mark.parametrize("case", GUARD_CASES)
def test_our_guard_rules_catch(case, tools, tmp_path):
    edits, expected = GUARD_CASES[case]
    template = bad_copy(tmp_path, *edits)
    findings = security.cfn_guard(tools, [ROOT / "rules" / "changeflow.guard"], template, PROJECT_GUARD)
    found = keys(findings)
    for rule, resource in expected:
        if resource:
            assert (rule, resource) in found, findings
        else:  # a rule about Globals or Parameters names no resource
            assert rule in {check for check, _ in found}, findings


def test_the_third_party_tools_catch_a_wildcard_policy_pitr_off_and_a_log_group_without_retention(tools, tmp_path):
    star = (UPDATE_LATEST_POLICY, UPDATE_LATEST_POLICY.replace("[dynamodb:PutItem]", '"*"')
            .replace("!GetAtt ChangeTable.Arn", '"*"'))
    # the unthrottled API too: cfn-lint-serverless's run on the translated template here is the one that must
    # catch it there (one run of the tool for both, not two)
    template = bad_copy(tmp_path, star, PITR_OFF, NO_RETENTION, NO_THROTTLING)
    cloudformation = security.write_cloudformation(template, tmp_path / "build")

    found = keys(security.checkov(tools, cloudformation))
    assert {("CKV_AWS_63", "UpdateLatestFunctionRole"), ("CKV_AWS_62", "UpdateLatestFunctionRole"),
            ("CKV_AWS_28", "ChangeTable"), ("CKV_AWS_66", "TagTtlLogGroup")} <= found

    found = keys(security.cfn_guard(tools, tools.control_tower_rules(), cloudformation, CONTROL_TOWER))
    assert {("CT.IAM.PR.1", "UpdateLatestFunctionRole"), ("CT.IAM.PR.5", "UpdateLatestFunctionRole"),
            ("CT.DYNAMODB.PR.1", "ChangeTable")} <= found

    found = keys(security.cfn_lint(tools, cloudformation, serverless=True, tool=SERVERLESS))
    assert {("WS1003", "UpdateLatestFunctionRole"), ("WS1004", "TagTtlFunction"), ("ES2003", "ChangeApiStage")} <= found
    # and no skip hides them
    for finding_key in (("CKV_AWS_63", "UpdateLatestFunctionRole"), ("CKV_AWS_28", "ChangeTable"),
                        ("CKV_AWS_66", "TagTtlLogGroup"), ("CT.DYNAMODB.PR.1", "ChangeTable")):
        tool = CONTROL_TOWER if finding_key[0].startswith("CT.") else CHECKOV
        assert not any(s.covers(Finding(tool, *finding_key, "")) for s in SKIPPED), finding_key


def test_cfn_lint_serverless_catches_an_unthrottled_api_on_both_templates(tools, tmp_path):
    # on the SAM template here; on the translated one (ChangeApiStage) in the test above, in the same run of
    # the tool as the other findings there
    template = bad_copy(tmp_path, NO_THROTTLING)
    assert ("ES2003", "ChangeApi") in keys(security.cfn_lint(tools, template, serverless=True, tool=SERVERLESS))


def test_cfn_lint_and_sam_validate_catch_an_invalid_property(tools, tmp_path):
    table = "  ChangeTable:\n    Type: AWS::DynamoDB::Table\n    Properties:\n      BillingMode: PAY_PER_REQUEST\n"
    template = bad_copy(tmp_path, (table, table.replace("PAY_PER_REQUEST", "PAY_PER_REQUESTS")))
    assert "ChangeTable" in {f.resource for f in security.cfn_lint(tools, template) if f.check.startswith("E")}
    assert any(f.check.startswith("E") for f in security.sam_validate(tools, template, tmp_path / "sam-home"))
