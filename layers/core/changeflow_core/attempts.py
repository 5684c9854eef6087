"""The latest attempt of a change at the API, in O(1) (issue 27 item 7).

The n-th attempt of a change is the execution named ``names.execution_name(entity, change, n)``. Finding
the latest by trying names 1, 2, 3... costs two Step Functions calls per earlier attempt, so a client that
keeps retrying a failing change eventually passes the front function's timeout. Instead one item per
change in the attempts table holds the number of its latest attempt, once there is a second one (no item:
the first). Its key is ``names.digest(entity, change)``: nothing of the entity id or its content.

Moving the number on is a conditional write (``attempt`` is still the one this submission saw failed),
so two submissions of one failed change never start two new attempts: the loser reads the number again
and answers the winner's execution. A number claimed whose execution was never started (the front
function stopped in between) is started by the next submission: the claimed name is tried first.

The item expires (TTL) once Step Functions no longer remembers the names it counts: a Standard execution
runs up to one year and is kept 90 days after it closes (Step Functions quotas).
"""

from __future__ import annotations

import time

from botocore.exceptions import ClientError

from .names import digest

ATTEMPT, EXPIRES_AT = "attempt", "expiresAt"
KEEP_SECONDS = (365 + 90) * 86_400


def key(entity_id: str, change_id: str) -> dict:
    return {"pk": {"S": digest(entity_id, change_id)}}


def latest(dynamodb, table: str, entity_id: str, change_id: str) -> int:
    """The number of the change's latest attempt that any submission claimed (1 when none claimed more)."""
    item = dynamodb.get_item(TableName=table, Key=key(entity_id, change_id), ConsistentRead=True,
                             ProjectionExpression="#attempt", ExpressionAttributeNames={"#attempt": ATTEMPT}).get("Item")
    return int(item[ATTEMPT]["N"]) if item else 1


def claim(dynamodb, table: str, entity_id: str, change_id: str, failed: int, now: float | None = None) -> bool:
    """Make ``failed + 1`` the latest attempt; ``False`` if another submission moved it on first."""
    try:
        dynamodb.update_item(
            TableName=table, Key=key(entity_id, change_id),
            UpdateExpression="SET #attempt = :next, #expires = :expires",
            # the latest is still the attempt this submission saw fail (no item: the first)
            ConditionExpression="attribute_not_exists(#attempt) OR #attempt = :failed",
            ExpressionAttributeNames={"#attempt": ATTEMPT, "#expires": EXPIRES_AT},
            ExpressionAttributeValues={":next": {"N": str(failed + 1)}, ":failed": {"N": str(failed)},
                                       ":expires": {"N": str(int((now or time.time()) + KEEP_SECONDS))}})
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
            return False
        raise
    return True
