"""EventBridge to Step Functions, Lambda and CloudWatch Logs: a rule's ``states`` target starts an execution, its
``lambda`` target is invoked asynchronously, and a ``logs`` target gets the event as EventBridge writes it (with
its ``account``, which moto leaves out), with the target's ``Input``/``InputPath``/``InputTransformer`` (stock moto
5.2.5 raises NotImplementedError on a ``states`` target and invokes a ``lambda`` one in its own Lambda,
which does not hold the stack's functions); an event that cannot be delivered goes to the target's
``DeadLetterConfig`` queue with the ``RULE_ARN``, ``TARGET_ARN``, ``ERROR_CODE`` and ``ERROR_MESSAGE``
attributes, as EventBridge does: the message body is the event as EventBridge shapes it (``time`` in ISO 8601,
not moto's Unix time; without moto's own ``ingestion-time``).

EventBridge acts for the rule (issue 33): a ``states`` target's ``RoleArn`` is assumed by
``events.amazonaws.com`` under the role's trust policy, with the rule's ARN as ``aws:SourceArn``, and the
execution is started with the role's permissions; a ``lambda`` target is invoked under the function's
resource-based policy, which must allow ``events.amazonaws.com`` for this rule. A rule of anyone else's
that names the stack's role or function is refused so.
https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-transform-target-input.html
https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-dlq.html
https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-resource-based.html#eb-lambda-permissions"""

from __future__ import annotations

from typing import Any

from ..iam import enforcement
from ..originals import ORIGINALS
from .input_transformer import event_without_detail


def patch_eventbridge_to_stepfunctions() -> None:
    import json
    import time
    import uuid

    import boto3
    from botocore.exceptions import ClientError
    from moto.events.models import EventTemplateParser, Rule
    from moto.utilities.arns import parse_arn

    original = ORIGINALS.setdefault("send_to_targets", Rule.send_to_targets)

    def target_input(target: dict, event: dict, rule) -> Any:
        if "Input" in target:
            return json.loads(target["Input"])
        if "InputTransformer" in target:
            transformer = target["InputTransformer"]
            return EventTemplateParser.parse(input_template=transformer.get("InputTemplate"),
                                             input_paths_map=transformer.get("InputPathsMap", {}), event=event,
                                             **({"rule": rule} if "event_template_parse" in ORIGINALS else {}))
        selected: Any = event
        for key in [k for k in target.get("InputPath", "$").lstrip("$").split(".") if k]:
            selected = selected[key]
        return selected

    def role_client(service: str, region: str, role_arn: str, rule):
        """A client with the credentials EventBridge gets for the target's role (its trust policy decides)."""
        from moto.sts.models import sts_backends

        enforcement.assume_role_as_service("events.amazonaws.com", rule.account_id, role_arn)
        session = sts_backends[rule.account_id]["aws"].assume_role(
            region_name=region, role_session_name=str(uuid.uuid4()), role_arn=role_arn, policy="", duration=3600,
            external_id="")
        return boto3.client(service, region_name=region, aws_access_key_id=session.access_key_id,
                            aws_secret_access_key=session.secret_access_key, aws_session_token=session.session_token)

    def deliver(target: dict, event: dict, rule) -> None:
        arn = parse_arn(target["Arn"])
        payload = json.dumps(target_input(target, event, rule))
        with enforcement.acting_as("events.amazonaws.com", rule.arn, rule.account_id):
            if arn.service == "lambda":
                boto3.client("lambda", region_name=arn.region).invoke(
                    FunctionName=target["Arn"], InvocationType="Event", Payload=payload)
                return
            client = (role_client("stepfunctions", arn.region, target["RoleArn"], rule) if target.get("RoleArn")
                      else boto3.client("stepfunctions", region_name=arn.region))
        client.start_execution(stateMachineArn=target["Arn"], name=str(uuid.uuid4()), input=payload)

    def journal(target: dict, event: dict, rule) -> None:
        """A log group target: the event as EventBridge writes it there (moto's leaves out ``account``), in a
        group named by its ARN as CloudFormation's GetAtt gives it (``...:log-group:NAME:*``)."""
        from moto.logs.models import logs_backends

        arn = parse_arn(target["Arn"])
        group = target["Arn"].split(":log-group:", 1)[1].removesuffix(":*")
        shaped = {**event_without_detail(event), "detail": event.get("detail", {})}
        message = target_input(target, event, rule) if ("Input" in target or "InputTransformer" in target) else shaped
        backend = logs_backends[arn.account][arn.region]
        stream = str(uuid.uuid4())
        backend.create_log_stream(group, stream)
        backend.put_log_events(group, stream, [{"timestamp": int(time.time() * 1000), "message": json.dumps(message)}])

    def send_to_targets(self, original_event, transform_input=True):
        # stock moto raises NotImplementedError on a states target: give it the others only
        ours = [t for t in self.targets if parse_arn(t["Arn"]).service in ("states", "lambda", "logs")]
        others = [t for t in self.targets if t not in ours]
        if others:
            self.targets = others
            try:
                original(self, original_event, transform_input)
            finally:
                self.targets = others + ours
        if not ours or not self.event_pattern.matches_event(original_event):
            return
        for target in ours:
            try:
                if parse_arn(target["Arn"]).service == "logs":
                    journal(target, original_event, self)
                    continue
                deliver(target, original_event, self)
            except (ClientError, KeyError, ValueError, enforcement.Denied) as exc:
                dead_letters = target.get("DeadLetterConfig", {}).get("Arn")
                if not dead_letters:
                    continue
                code = exc.response["Error"]["Code"] if isinstance(exc, ClientError) else (
                    "NO_PERMISSIONS" if isinstance(exc, enforcement.Denied) else type(exc).__name__)
                queue = parse_arn(dead_letters)
                sqs = boto3.client("sqs", region_name=queue.region)
                with enforcement.acting_as("events.amazonaws.com", self.arn, self.account_id):  # under its policy
                    sqs.send_message(
                        QueueUrl=f"https://sqs.{queue.region}.amazonaws.com/{queue.account}/{queue.resource_id}",
                        MessageBody=json.dumps({**event_without_detail(original_event),
                                                "detail": original_event.get("detail")}, default=str),
                        MessageAttributes={
                            "RULE_ARN": {"DataType": "String", "StringValue": self.arn},
                            "TARGET_ARN": {"DataType": "String", "StringValue": target["Arn"]},
                            "ERROR_CODE": {"DataType": "String", "StringValue": code},
                            "ERROR_MESSAGE": {"DataType": "String", "StringValue": str(exc)[:1000]},
                        },
                    )

    Rule.send_to_targets = send_to_targets
