"""The events EventBridge could not start an execution for: the rule's dead-letter queue, listed, and
replayed as the rule would have started them (issue 33.6).

EventBridge sends an event it gave up on to the target's ``DeadLetterConfig`` queue: the message body is the
event, and the attributes ``RULE_ARN``, ``TARGET_ARN``, ``ERROR_CODE`` and ``ERROR_MESSAGE`` say where it
was going and why it failed (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-dlq.html).
The rule's target is the event function (issue 33: EventBridge cannot seal an execution input); when that
function could not start the change (Step Functions throttling, after Lambda's two retries), Lambda sends
its invocation record to the same queue with the function's role
(https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-retain-records.html): ``requestPayload`` is
what the rule handed the function, the event's ingestion time included. The queue's policy lets only the
bus's rules and that role send to it, with an explicit deny for everyone else (template.yaml), so a message
there is an event EventBridge received.

A replay hands the event function what the rule would have handed it (``delivered``): the event's detail as
the request, the rule and the event (its ``account``, set by EventBridge, and ``source``, ``id``, ``region``)
as the principal, which the function seals, so the version records who sent the change, not who replayed it
(CloudTrail records the ``Invoke``; a version the events journal does not vouch for is refused by ``verify
--principals``). The change's first receipt is the ingestion time when the message is Lambda's record, else
the event's ``time``, never later than SQS's ``SentTimestamp`` (when EventBridge gave up, AWS's own record): a
PutEvents caller may set ``time``, and a replayed change must not look newer than it was, or it could
overwrite what was written after it. The execution is named as the rule's function names it, after the
event (``names.event_execution_name``): replaying a message twice, or a message whose first delivery did
start, starts nothing more on a Standard workflow. A message is deleted once its execution has started.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from changeflow_core import principal

from ..common.errors import ToolFailure
from changeflow_core.names import event_execution_name

HIDE_WHILE_READ_S = 30  # each message stays invisible to others while it is listed or replayed


@dataclass(frozen=True)
class DeadLetter:
    message_id: str
    receipt_handle: str
    event: dict[str, Any]
    rule: str
    error: str
    sent_at_ms: int  # SQS SentTimestamp: when EventBridge put it in the queue
    receive_count: int
    ingested_at: str | None = None  # EventBridge's ingestion time, in a record of the event function
    @property
    def received_at_ms(self) -> int:
        """When the change was first received: the ingestion time, else the event's ``time``, bounded by
        ``SentTimestamp``."""
        try:
            stated = int(datetime.fromisoformat(str(self.ingested_at or self.event.get("time")).replace(
                "Z", "+00:00")).timestamp() * 1000)
        except ValueError:
            return self.sent_at_ms
        return min(stated, self.sent_at_ms)

    @property
    def execution_name(self) -> str:
        return event_execution_name(self.event.get("id"))

    def delivered(self) -> dict[str, Any]:
        """What the rule's InputTransformer hands the event function (template.yaml), from the dead letter."""
        event = {k: v for k, v in self.event.items() if k != "detail"}
        return {principal.REQUEST: self.event.get("detail"), "event": event, "rule": self.rule,
                principal.RECEIVED_AT: self.received_at_ms}

    def to_json(self) -> dict[str, Any]:
        detail = self.event.get("detail") if isinstance(self.event.get("detail"), dict) else {}
        return {"messageId": self.message_id, "eventId": self.event.get("id"), "time": self.event.get("time"),
                "account": self.event.get("account"), "source": self.event.get("source"), "rule": self.rule,
                "entityId": detail.get("entityId"), "changeId": detail.get("changeId"),
                "operation": detail.get("operation"), "error": self.error, "receivedAt": self.received_at_ms,
                "deadLetteredAt": self.sent_at_ms, "receiveCount": self.receive_count}


def _letter(message: dict[str, Any]) -> DeadLetter:
    attributes = {k: v.get("StringValue", "") for k, v in (message.get("MessageAttributes") or {}).items()}
    try:
        body = json.loads(message["Body"])
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {}
    sent = {"message_id": message["MessageId"], "receipt_handle": message["ReceiptHandle"],
            "sent_at_ms": int(message["Attributes"]["SentTimestamp"]),
            "receive_count": int(message["Attributes"].get("ApproximateReceiveCount", 1))}
    if isinstance(body.get("requestPayload"), dict) and "requestContext" in body:  # the event function's record
        delivered, answer = body["requestPayload"], body.get("responsePayload") or {}
        event = {**(delivered.get("event") or {}), "detail": delivered.get(principal.REQUEST)}
        error = f"{answer.get('errorType', '')}: {str(answer.get('errorMessage', ''))[:1000]}".strip(": ")
        return DeadLetter(event=event, rule=str(delivered.get("rule", "")), error=error,
                          ingested_at=delivered.get(principal.RECEIVED_AT), **sent)
    return DeadLetter(event=body, rule=attributes.get("RULE_ARN", ""),
                      error=f"{attributes.get('ERROR_CODE', '')}: {attributes.get('ERROR_MESSAGE', '')}".strip(": "),
                      **sent)


class DeadLetters:
    """The dead-letter queue of a stack (its ``ChangeEventsDeadLetterQueueUrl`` output)."""

    def __init__(self, client):
        self.client = client
        self.sqs = client.make("sqs")
        self.url = client.outputs["ChangeEventsDeadLetterQueueUrl"]
        self.function = client.outputs.get("ReceiveChangeEventFunctionName")

    def receive(self) -> list[DeadLetter]:
        """Every message in the queue, each hidden from other readers while this one holds it (``release``
        gives them back); a message a reader elsewhere holds is not seen."""
        letters: dict[str, DeadLetter] = {}
        while True:
            page = self.sqs.receive_message(QueueUrl=self.url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                                            VisibilityTimeout=HIDE_WHILE_READ_S, MessageAttributeNames=["All"],
                                            AttributeNames=["SentTimestamp", "ApproximateReceiveCount"])
            new = [_letter(m) for m in page.get("Messages", []) if m["MessageId"] not in letters]
            if not new:
                return sorted(letters.values(), key=lambda letter: (letter.sent_at_ms, letter.message_id))
            letters.update((letter.message_id, letter) for letter in new)

    def release(self, letters: list[DeadLetter]) -> None:
        """Make the messages visible again at once."""
        for start in range(0, len(letters), 10):
            entries = [{"Id": str(i), "ReceiptHandle": letter.receipt_handle, "VisibilityTimeout": 0}
                       for i, letter in enumerate(letters[start:start + 10])]
            self.sqs.change_message_visibility_batch(QueueUrl=self.url, Entries=entries)

    def list(self) -> list[DeadLetter]:
        letters = self.receive()
        self.release(letters)
        return letters

    def replay(self, message_ids: list[str] | None = None) -> tuple[list[tuple[DeadLetter, str]], list[str]]:
        """Start each message's execution (every message when ``message_ids`` is None), then delete it:
        ``([(letter, execution ARN)], message ids not in the queue)``. The others are given back."""
        letters = self.receive()
        wanted = {letter.message_id for letter in letters} if message_ids is None else set(message_ids)
        chosen = [letter for letter in letters if letter.message_id in wanted]
        self.release([letter for letter in letters if letter.message_id not in wanted])
        started = []
        lam = self.client.make("lambda")
        try:
            for letter in chosen:
                answer = lam.invoke(FunctionName=self.function, Payload=json.dumps(letter.delivered()))
                result = json.loads(answer["Payload"].read() or b"null")
                if answer.get("FunctionError"):  # the function could not start it: left in the queue
                    raise ToolFailure(f"the event function could not start {letter.message_id}: "
                                       f"{(result or {}).get('errorType')}: {(result or {}).get('errorMessage')}")
                self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=letter.receipt_handle)
                started.append((letter, result["executionArn"]))
        finally:
            done = {letter.message_id for letter, _ in started}
            self.release([letter for letter in chosen if letter.message_id not in done])
        return started, sorted(wanted - {letter.message_id for letter in letters})
