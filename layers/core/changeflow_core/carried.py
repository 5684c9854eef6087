"""What the state machine carries from state to state, and the bound that keeps every state under Step
Functions' limit, checked by the fetch step before anything is written.

Step Functions refuses a state input or output, task parameters or task result over 256 KiB (UTF-8):
``States.DataLimitExceeded``, a terminal error no ``States.ALL`` catches ("Quotas related to state machine
executions", https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html#service-limits-task-executions;
"Error names", https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html). Once the
v0 write has landed, such a failure would leave the version out of history, so the bound is checked on
the data itself, every attempt, before the write.

What each state of ``statemachines/change.asl.json`` carries, read from its Parameters, ResultSelector and
ResultPath (``tests/test_state_bounds.py`` checks this account against the definition), in terms of R, the
fetch step's result (``change``, ``latest``, ``content``, ``writer``, ``attempt``, ``tries``, ``proof``):

- "Fetch the latest version" / "... again": task result = the ``lambda:invoke`` envelope around R
  (``ENVELOPE_BYTES``); output = R.
- "Write the new latest version": parameters = R without ``writer``, plus ``execution`` {id, name};
  output = R + ``written`` (3 small fields and a proof), or, through its Catch, R + ``error`` {Error, Cause}
  (``ERROR_BYTES``).
- "Draw a back-off", "Back off before reading again": R without ``writer`` (``latest`` stays: the fetch
  step's proof covers it), plus ``error``, ``waitSeconds`` (smaller than the ``writer`` ARN it replaces), and
  what tells the next read whether the write landed (``tried``, the version R's ``tries`` named, and
  ``lastWrite``, the error's name: ``LOST_WRITE_BYTES``). The second fetch's parameters: the same without
  ``waitSeconds``, plus the two writers' version ARNs the definition names (``WRITERS_BYTES``). When it
  keeps failing, its Catch puts its error in place of the write's (``$.error``): no larger.
- "Record the version in history": parameters = R without ``writer``, plus ``written``, ``execution``
  and ``retryCount``; its result drops the content. Every later state is a few hundred bytes.

So the largest state of an attempt is R plus the largest of those additions, and R is measured as it is
(every field of the change, whatever a later version adds to it; the ids ``v0`` remembers; the content as
DynamoDB JSON), never estimated from the request.
"""

from __future__ import annotations

from typing import Any

from . import items, model
from .errors import ValidationError

STATE_LIMIT_BYTES = 256 * 1024  # Step Functions: a state's input or output, a task's parameters or result
# moto's interpreter (a port of LocalStack's) refuses a state of exactly 256 KiB (``len < limit``): the
# stricter reading is the bound.
LARGEST_STATE_BYTES = STATE_LIMIT_BYTES - 1

# The lambda:invoke integration's result around the function's Payload on AWS: ExecutedVersion,
# SdkHttpMetadata (AllHttpHeaders and HttpHeaders: eight headers twice, among them a request id, a date,
# an X-Ray trace header), SdkResponseMetadata, StatusCode: about 1 KB ("Invoke an AWS Lambda function
# with Step Functions", https://docs.aws.amazon.com/step-functions/latest/dg/connect-lambda.html, the
# output of the example); moto's is 62 bytes. Twice AWS's, for a longer trace header.
ENVELOPE_BYTES = 2 * 1024

# The error a Catch puts beside R ({"Error", "Cause"}, the Cause being the function's error document as
# JSON text, escaped once more inside the state): the write step's own errors (WriteConflict 1.5 KB with
# its stack trace, a DynamoDB ThrottlingException after the SDK's retries 2.2 KB, Sandbox.Timedout 0.3 KB,
# measured on the embedded stack) with room for a deeper stack trace on AWS.
ERROR_BYTES = 8 * 1024

# ``execution`` {id: an execution ARN (at most 2,048 characters, API_DescribeExecution), name} and
# ``written`` {outcome, version, recordedAt, proof (a 43-character MAC, changeflow_core.seal)} and
# ``retryCount``, in the write and history steps' parameters. R carries its own proof (measured with it).
EXECUTION_BYTES = 2048 + 80 + 40
WRITTEN_BYTES = 100 + 60

# ``writers`` {update, tombstone} in the fetch steps' parameters: two qualified function ARNs (Lambda: a
# FunctionName of at most 170 characters with its qualifier, API_Invoke), as constants of the definition.
WRITERS_BYTES = 2 * 170 + 64

# ``tried`` (a version number) and ``lastWrite`` (an error name: Step Functions allows 256 characters) on the
# back-off path (issue 32: the read after a lost answer settles whether the write landed)
LOST_WRITE_BYTES = 256 + 64

ADDED_BYTES = max(ENVELOPE_BYTES, ERROR_BYTES + len(', "error": ') + WRITERS_BYTES + LOST_WRITE_BYTES,
                  EXECUTION_BYTES + WRITTEN_BYTES + 64)
MAX_RESULT_BYTES = LARGEST_STATE_BYTES - ADDED_BYTES  # the largest fetch result every state can carry


def largest_state(result: dict[str, Any]) -> int:
    """Bytes of the largest state an attempt with fetch result ``result`` can produce."""
    return items.wire_size(result) + ADDED_BYTES


def parts(result: dict[str, Any]) -> dict[str, int]:
    """What takes the room in ``result``, by the request field a caller can change (the content counted
    under the field it comes from: ``attributes`` of a put, ``toVersion`` of a rollback, ``set`` of a
    patch, which also carries its ``set`` and ``remove``), and the ids ``v0`` remembers."""
    change = result["change"]
    sizes = {field: items.wire_size(value) for field, value in change.items()
             if value is not None and field not in ("operation", "effectiveAt", "expectedVersion", "toVersion")}
    content = items.wire_size(result["content"]) if result.get("content") is not None else 0
    source = {model.PUT: "attributes", model.ROLLBACK: "toVersion", model.PATCH: "content"}.get(change["operation"])
    if source:
        sizes[source] = sizes.get(source, 0) + content
    sizes["changeIds"] = items.wire_size((result.get("latest") or {}).get("changeIds") or {})
    clocks = (result.get("latest") or {}).get(model.FIELD_CLOCKS)
    if clocks:  # a patch carries v0's field clocks: the fields patched since its last put (issue 34)
        sizes[model.FIELD_CLOCKS] = items.wire_size(clocks)
    return sizes


def named_field(result: dict[str, Any]) -> str:
    """The request field to name when ``result`` does not fit: the largest the caller sent (a patch's
    ``set`` or ``remove``, whichever is larger, since the content it patches is the entity's)."""
    sizes = parts(result)
    candidates = {k: v for k, v in sizes.items() if k not in ("changeIds", "content", model.FIELD_CLOCKS)}
    if result["change"]["operation"] == model.PATCH:
        candidates = {k: sizes.get(k, 0) for k in ("set", "remove")}
    return max(candidates, key=lambda field: candidates[field]) if candidates else "request"


def check(result: dict[str, Any]) -> None:
    """Refuse, by the field that takes the room, a fetch result that some state of the attempt could not
    carry; nothing has been written when this runs."""
    size = items.wire_size(result)
    if size <= MAX_RESULT_BYTES:
        return
    sizes = parts(result)
    shown = ", ".join(f"{name} {sizes[name]}" for name in sorted(sizes, key=lambda n: -sizes[n]) if sizes[name])
    raise ValidationError(
        named_field(result),
        f"the workflow would carry {size} bytes from state to state as DynamoDB JSON ({shown}), over the "
        f"{MAX_RESULT_BYTES} that leave room for an error on the back-off path within Step Functions' "
        f"{STATE_LIMIT_BYTES}-byte state limit",
    )
