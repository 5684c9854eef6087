"""EventBridge to Step Functions: a rule's ``states`` target starts an execution with the target's
``Input``/``InputPath``/``InputTransformer`` (stock moto 5.2.5 raises NotImplementedError on such a
target), and an event that cannot start one goes to the target's ``DeadLetterConfig`` queue with the
``RULE_ARN``, ``TARGET_ARN``, ``ERROR_CODE`` and ``ERROR_MESSAGE`` attributes, as EventBridge does: the
message body is the event as EventBridge shapes it (``time`` in ISO 8601, not moto's Unix time; without
moto's own ``ingestion-time``).
https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-transform-target-input.html
https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-dlq.html"""

from __future__ import annotations

from typing import Any

from ..originals import ORIGINALS
from .input_transformer import event_without_detail


def patch_eventbridge_to_stepfunctions() -> None:
    import json
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

    def send_to_targets(self, original_event, transform_input=True):
        # stock moto raises NotImplementedError on a states target: give it the others only
        machines = [t for t in self.targets if parse_arn(t["Arn"]).service == "states"]
        others = [t for t in self.targets if t not in machines]
        if others:
            self.targets = others
            try:
                original(self, original_event, transform_input)
            finally:
                self.targets = others + machines
        if not machines or not self.event_pattern.matches_event(original_event):
            return
        for target in machines:
            arn = parse_arn(target["Arn"])
            try:
                boto3.client("stepfunctions", region_name=arn.region).start_execution(
                    stateMachineArn=target["Arn"], name=str(uuid.uuid4()),
                    input=json.dumps(target_input(target, original_event, self)))
            except (ClientError, KeyError, ValueError) as exc:
                dead_letters = target.get("DeadLetterConfig", {}).get("Arn")
                if not dead_letters:
                    continue
                code = exc.response["Error"]["Code"] if isinstance(exc, ClientError) else type(exc).__name__
                queue = parse_arn(dead_letters)
                sqs = boto3.client("sqs", region_name=queue.region)
                sqs.send_message(
                    QueueUrl=sqs.get_queue_url(QueueName=queue.resource_id)["QueueUrl"],
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
