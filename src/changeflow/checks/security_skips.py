"""The checks ``make lint`` skips, each with its reason: the one place (docs/operations.md's table is
``security.skipped_table()`` of this one), and the names of the tools that report them."""

from __future__ import annotations

from dataclasses import dataclass

CFN_LINT = "cfn-lint"
SAM_VALIDATE = "sam validate --lint"
SERVERLESS = "cfn-lint-serverless"
CHECKOV = "checkov"
CONTROL_TOWER = "cfn-guard (Control Tower)"
PROJECT_GUARD = "cfn-guard (rules/changeflow.guard)"

PINNED_ROLES_AND_ALIASES = tuple(f"{step}Function{kind}" for kind in ("Role", "Aliaslive")
                                 for step in ("FetchLatest", "UpdateLatest", "PutHistory", "DeleteTombstone", "TagTtl"))
READ_API_PERMISSIONS = tuple(f"ReadApiFunction{event}PermissionStage"
                             for event in ("GetEntity", "ListVersions", "GetVersion", "GetVersionExecution")) + (
    "SubmitChangeApiPermission",)


@dataclass(frozen=True)
class Skip:
    """A finding that is not right for this app: ``tool`` and ``check`` as the tool names them,
    ``resources`` the logical ids it is skipped for (empty: every resource)."""

    tool: str
    check: str
    resources: tuple[str, ...]
    reason: str

    def covers(self, finding) -> bool:  # a security.Finding
        return (finding.tool == self.tool and finding.check == self.check
                and (not self.resources or finding.resource in self.resources))


# Every check skipped, with its reason: the one place (docs/operations.md's table is this table).
SKIPPED: tuple[Skip, ...] = (
    Skip(CHECKOV, "CKV_AWS_117", (), "Lambda in a VPC: the functions call only DynamoDB over its AWS endpoint; "
         "a VPC would add NAT gateway or VPC endpoint cost and cold-start time and protect nothing here."),
    Skip(CONTROL_TOWER, "CT.LAMBDA.PR.3", (), "The same control (Lambda in a customer VPC) as CKV_AWS_117."),
    Skip(CHECKOV, "CKV_AWS_116", (), "Lambda dead-letter queue: the step and API functions are invoked "
         "synchronously (Step Functions tasks, API Gateway, the feed's pipe: callers retry and catch); the event "
         "function's failures go to an on-failure destination (EventInvokeConfig: the rule's queue), which "
         "supersedes a DLQ. The digest function's schedule invokes it, and a failed digest has nothing to redrive: "
         "the next one reads every change since the last digest written (DigestFailedAlarm pages)."),
    Skip(SERVERLESS, "ES4000", ("SealTamperedRule",), "The tamper alarm counts the rule's matches "
         "(TriggeredRules), which a failed delivery of the evidence does not undo; the change queue takes only "
         "the change bus's events (its policy)."),
    Skip(SERVERLESS, "ES1007", ("ReceiveChangeEventPermission",), "The event function's on-failure destination is "
         "SAM's EventInvokeConfig property: on template.yaml the rule sees no AWS::Lambda::EventInvokeConfig "
         "resource; on the translated template, where SAM made it, it finds it and passes."),
    Skip(CHECKOV, "CKV_AWS_115", (), "Reserved concurrency: a reservation takes capacity out of the account's "
         "shared pool in every deployment; requests are throttled at the API stage (ApiThrottling* parameters) "
         "and executions by Step Functions' quotas. An account that needs a cap sets it per deployment."),
    Skip(CHECKOV, "CKV_AWS_173", (), "Lambda environment variables with a customer-managed KMS key: they hold "
         "only table names and settings (no secrets), and Lambda encrypts them at rest with its AWS-managed key."),
    Skip(CHECKOV, "CKV_AWS_120", ("ChangeApiStage",), "API Gateway caching: reads must return the latest "
         "version (a cache would serve stale versions) and POST /changes must never be cached; caching also "
         "bills by the hour."),
    Skip(CHECKOV, "CKV_AWS_18", ("DigestBucket",), "Server access logs of the digest bucket would need a second "
         "bucket (one with Object Lock cannot receive them); S3 records when every object version was written, "
         "verify --digests reports every version and delete marker that is not the chain's, and CloudTrail data "
         "events record who called, for an account that turns them on."),
    Skip(CONTROL_TOWER, "CT.S3.PR.2", ("DigestBucket",), "The same control (server access logging) as "
         "CKV_AWS_18."),
    Skip(CONTROL_TOWER, "CT.S3.PR.10", ("DigestBucket",), "Digests hold entity ids, versions and hashes, no "
         "content; SSE-S3 encrypts them at rest. A customer-managed KMS key in the stack's account would let its "
         "administrator make every locked digest unreadable (disable or delete the key): the lock would hold, "
         "the digests would prove nothing."),
    Skip(CONTROL_TOWER, "CT.S3.PR.4", ("DigestBucket",), "Event notifications: nothing in the stack reacts to a "
         "digest being written; an auditor who wants one per digest adds an EventBridge rule in their account."),
    Skip(SERVERLESS, "ES6000", ("ChangeEventsDeadLetterQueue", "FeedDeadLetterQueue"), "Each queue is a dead-letter "
         "queue (the rule's target's; the feed's pipe's): the rule only knows dead-letter queues of SQS queues."),
    Skip(CONTROL_TOWER, "CT.SQS.PR.2", ("ChangeEventsDeadLetterQueue", "FeedDeadLetterQueue"), "Each queue is encrypted at rest: "
         "SqsManagedSseEnabled, or with the KmsKeyArn parameter the customer-managed key (KmsMasterKeyId); both by "
         "Fn::If on UseKmsKey (they exclude each other), which the rule does not resolve (tests/test_alarms.py)."),
    Skip(SERVERLESS, "W3011", PINNED_ROLES_AND_ALIASES, "UpdateReplacePolicy: Retain is on the five pinned "
         "functions for their AWS::Lambda::Version, kept when a new Description replaces it, for the executions "
         "still running on it; SAM passes it to the function's role and alias too, which are updated in place, "
         "never replaced, and which the stack's deletion should delete (so no DeletionPolicy: Retain)."),
    Skip(CONTROL_TOWER, "CT.SQS.PR.1", ("ChangeEventsDeadLetterQueue", "FeedDeadLetterQueue"), "The same finding "
         "as ES6000: each queue is a dead-letter queue (RedriveAllowPolicy denyAll), not a work queue."),
    Skip(CONTROL_TOWER, "CT.LAMBDA.PR.2", READ_API_PERMISSIONS, "Not public: SAM's permissions for the read "
         "routes, and SubmitChangeApiPermission for POST /changes, name the API Gateway principal with a SourceArn "
         "on this API, built with Fn::Sub, which the rule does not resolve (it accepts only a literal, Ref or GetAtt)."),
    Skip(CONTROL_TOWER, "CT.STEPFUNCTIONS.PR.1", ("ChangeStateMachine",), "Logging is on: Level is the "
         "StateMachineLogLevel parameter, which allows only ALL or ERROR (rules/changeflow.guard enforces it), "
         "and the rule does not resolve a Ref."),
    Skip(CONTROL_TOWER, "CT.APIGATEWAY.PR.1", ("ChangeApiStage",), "Access logging is on (AccessLogSetting, to a "
         "log group with retention); execution logging would write to a log group API Gateway creates outside "
         "the stack, with no retention or encryption setting."),
    Skip(CONTROL_TOWER, "CT.CLOUDWATCH.PR.1", (), "Alarm actions are the AlarmTopicArn parameter's topic, which "
         "has no default: every deploy names the topic, or says none (Fn::If), a deliberate choice that the alarms "
         "only change state, visible in CloudWatch and to EventBridge."),
    Skip(CONTROL_TOWER, "CT.CLOUDWATCH.PR.2", (), "Every log group has a retention: the LogRetentionDays "
         "parameter (default 30 days), and for the state machine's execution log, the audit trail past Step "
         "Functions' 90 days, ExecutionLogRetentionDays (default 731); the rule does not resolve a Ref."),
    Skip(CONTROL_TOWER, "CT.CLOUDWATCH.PR.3", (), "CloudWatch Logs encrypts every log group at rest; a "
         "customer-managed key is the KmsKeyArn parameter (Fn::If on every log group, enforced by "
         "rules/changeflow.guard), which the rule does not resolve."),
)
