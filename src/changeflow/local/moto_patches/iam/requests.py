"""What each request asks IAM for: its action, the resource ARN it acts on (the Service Authorization
Reference's formats), the resource's own policy, the condition keys the service adds, and the other
permissions it needs (``enforcement.Check``). Parameter names are botocore's service models'.

- DynamoDB: ``arn:aws:dynamodb:<region>:<account>:table/<TableName>`` (``.../index/<IndexName>`` for a Query
  or Scan of an index, https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/specifying-conditions.html); a batch or a transaction is
  authorized item by item, each as its own action (``dynamodb:PutItem``, ``UpdateItem``, ``DeleteItem``,
  ``ConditionCheckItem``). https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html
- Step Functions: the ``stateMachineArn`` or ``executionArn`` of the request; CreateStateMachine needs
  ``iam:PassRole`` on its ``roleArn``.
- KMS: the key's ARN (from ``KeyId``, an alias, or the ciphertext), its key policy (authoritative), and
  ``kms:EncryptionContext:<key>`` for each pair of the request's encryption context.
  https://docs.aws.amazon.com/kms/latest/developerguide/conditions-kms.html
- Secrets Manager: the secret's ARN and its resource policy; under a customer managed key a read also needs
  ``kms:Decrypt`` and a write ``kms:GenerateDataKey``, asked by Secrets Manager for the caller
  (``kms:ViaService``, ``kms:EncryptionContext:SecretARN``).
- EventBridge: a rule's ARN (``rule/[<bus>/]<name>``); PutTargets needs ``iam:PassRole`` on each target's
  ``RoleArn``; PutEvents is authorized entry by entry on its bus, under the bus's policy, with
  ``events:source`` and ``events:detail-type`` (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-conditions.html).
- SQS: the queue's ARN and its policy. STS AssumeRole: the role's trust policy (authoritative).
- IAM: the user, role or policy the request names. CloudWatch Logs: the log group. Scheduler: the schedule, and
  ``iam:PassRole`` on its target's role. Kinesis: the stream
  (``StreamARN``, or ``arn:aws:kinesis:<region>:<account>:stream/<StreamName>``). S3: ``s3_checks``.
"""

from __future__ import annotations

import base64
from typing import Any

from .enforcement import Check
from .evaluation import parsed

DYNAMODB_ITEM_ACTIONS = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem",
                         "ConditionCheck": "ConditionCheckItem", "Get": "GetItem"}


def checks_of(response: Any, service: str, action: str, params: dict[str, Any], account: str) -> list[Check]:
    region = getattr(response, "region", None) or "us-east-1"
    handler = _HANDLERS.get(service)
    if handler is None:
        return [Check(f"{service}:{action}")]
    return handler(action, params, region, account)


def _arn(service: str, region: str, account: str, resource: str) -> str:
    return f"arn:aws:{service}:{region}:{account}:{resource}"


def _dynamodb(action: str, params: dict, region: str, account: str) -> list[Check]:
    table = lambda name: _arn("dynamodb", region, account, f"table/{name}")  # noqa: E731
    if action in ("BatchWriteItem", "BatchGetItem"):
        checks = []
        for name, requests in (params.get("RequestItems") or {}).items():
            if action == "BatchGetItem":
                checks.append(Check("dynamodb:BatchGetItem", table(name)))
                continue
            for request in requests:
                kind = "PutItem" if "PutRequest" in request else "DeleteItem"
                checks.append(Check(f"dynamodb:{kind}", table(name)))
        return checks
    if action in ("TransactWriteItems", "TransactGetItems"):
        return [Check(f"dynamodb:{DYNAMODB_ITEM_ACTIONS[kind]}", table(spec["TableName"]))
                for item in params.get("TransactItems") or [] for kind, spec in item.items()]
    if "TableName" in params:  # a Query or Scan of an index acts on the index's ARN, not the table's
        index = f"/index/{params['IndexName']}" if params.get("IndexName") else ""
        return [Check(f"dynamodb:{action}", table(params["TableName"]) + index)]
    return [Check(f"dynamodb:{action}")]


def _states(action: str, params: dict, region: str, account: str) -> list[Check]:
    for key in ("stateMachineArn", "executionArn"):
        if key in params:
            return [Check(f"states:{action}", params[key])]
    if action == "CreateStateMachine":
        return [Check("states:CreateStateMachine", _arn("states", region, account, f"stateMachine:{params.get('name')}")),
                pass_role(params.get("roleArn"), "states.amazonaws.com")]
    return [Check(f"states:{action}")]


def pass_role(role_arn: str | None, service: str) -> Check:
    """iam:PassRole of ``role_arn`` to ``service`` (``iam:PassedToService``)."""
    return Check("iam:PassRole", role_arn or "*", context={"iam:PassedToService": service})


def _kms_key(region: str, account: str, key_id: str | None, ciphertext: str | None = None):
    from moto.kms.models import kms_backends
    from moto.kms.utils import _deserialize_ciphertext_blob

    backend = kms_backends[account][region]
    try:
        if key_id is None and ciphertext:
            key_id = _deserialize_ciphertext_blob(base64.b64decode(ciphertext)).key_id
        return backend.keys[backend.any_id_to_key_id(key_id)] if key_id else None
    except Exception:  # noqa: BLE001 - no such key: KMS itself answers NotFound
        return None


def kms_check(action: str, key, context: dict[str, str] | None = None, via: str | None = None) -> Check:
    keys = {f"kms:EncryptionContext:{k}": v for k, v in (context or {}).items()}
    if via:
        keys["kms:ViaService"] = via
    return Check(action, key.arn, parsed(key.policy) if key.policy else None, True, keys)


def _kms(action: str, params: dict, region: str, account: str) -> list[Check]:
    key = _kms_key(region, account, params.get("KeyId") or params.get("DestinationKeyId"),
                   params.get("CiphertextBlob"))
    if key is None:
        return [Check(f"kms:{action}")]
    return [kms_check(f"kms:{action}", key, params.get("EncryptionContext"))]


def _secretsmanager(action: str, params: dict, region: str, account: str) -> list[Check]:
    from moto.secretsmanager.models import secretsmanager_backends

    backend = secretsmanager_backends[account][region]
    secret_id = params.get("SecretId")
    secret = backend.secrets[secret_id] if secret_id and secret_id in backend.secrets else None
    if secret is None:
        checks = [Check(f"secretsmanager:{action}")]
        key = _kms_key(region, account, params.get("KmsKeyId")) if action == "CreateSecret" else None
        if key is not None:  # a new secret under a customer managed key: its first version's data key
            checks.append(kms_check("kms:GenerateDataKey", key, via=f"secretsmanager.{region}.amazonaws.com"))
        return checks
    checks = [Check(f"secretsmanager:{action}", secret.arn, parsed(secret.policy) if secret.policy else None)]
    key = _kms_key(region, account, secret.kms_key_id) if secret.kms_key_id else None
    if key is not None:
        via = f"secretsmanager.{region}.amazonaws.com"
        context = {"SecretARN": secret.arn, "SecretVersionId": params.get("VersionId") or ""}
        if action == "GetSecretValue":
            checks.append(kms_check("kms:Decrypt", key, context, via))
        elif action in ("PutSecretValue", "UpdateSecret", "RotateSecret"):
            checks.append(kms_check("kms:GenerateDataKey", key, context, via))
    return checks


def _events(action: str, params: dict, region: str, account: str) -> list[Check]:
    from moto.events.models import events_backends

    backend = events_backends[account][region]

    def bus(name: str | None):
        name = (name or "default").split("/")[-1]
        return backend.event_buses.get(name)

    if action == "PutEvents":
        checks = []
        for index, entry in enumerate(params.get("Entries") or []):
            target = bus(entry.get("EventBusName"))
            arn = target.arn if target else _arn("events", region, account, f"event-bus/{entry.get('EventBusName')}")
            policy = parsed(target.policy) if target is not None and target.policy else None
            checks.append(Check("events:PutEvents", arn, policy, context={
                "events:source": entry.get("Source"), "events:detail-type": entry.get("DetailType")}, entry=index))
        return checks
    name = params.get("Name") or params.get("Rule")
    if name:
        bus_name = (params.get("EventBusName") or "default").split("/")[-1]
        arn = _arn("events", region, account, f"rule/{'' if bus_name == 'default' else bus_name + '/'}{name}")
        checks = [Check(f"events:{action}", arn)]
        if action == "PutTargets":
            checks += [pass_role(t["RoleArn"], "events.amazonaws.com") for t in params.get("Targets") or []
                       if t.get("RoleArn")]
        return checks
    return [Check(f"events:{action}")]


def _sqs(action: str, params: dict, region: str, account: str) -> list[Check]:
    from moto.sqs.models import sqs_backends

    url = params.get("QueueUrl")
    if not url:
        return [Check(f"sqs:{action}")]
    name = url.rstrip("/").split("/")[-1]
    queue = sqs_backends[account][region].queues.get(name)
    policy = parsed(queue.policy) if queue is not None and getattr(queue, "policy", None) else None
    return [Check(f"sqs:{action}", _arn("sqs", region, account, name), policy)]


def _sts(action: str, params: dict, region: str, account: str) -> list[Check]:
    if action != "AssumeRole" or not params.get("RoleArn"):
        return [Check(f"sts:{action}")] if action != "GetCallerIdentity" else []
    from moto.iam.models import iam_backends

    try:
        role = iam_backends[account]["aws"].get_role_by_arn(params["RoleArn"])
    except Exception:  # noqa: BLE001 - a role of another account, or none: STS's own answer
        return [Check("sts:AssumeRole", params["RoleArn"])]
    return [Check("sts:AssumeRole", role.arn, parsed(role.assume_role_policy_document), True)]


def _iam(action: str, params: dict, region: str, account: str) -> list[Check]:
    if params.get("RoleName"):
        return [Check(f"iam:{action}", f"arn:aws:iam::{account}:role/{params['RoleName']}")]
    if params.get("UserName"):
        return [Check(f"iam:{action}", f"arn:aws:iam::{account}:user/{params['UserName']}")]
    if params.get("PolicyArn"):
        return [Check(f"iam:{action}", params["PolicyArn"])]
    return [Check(f"iam:{action}")]


def _logs(action: str, params: dict, region: str, account: str) -> list[Check]:
    group = params.get("logGroupName")
    if not group:
        return [Check(f"logs:{action}")]
    stream = params.get("logStreamName")
    resource = f"log-group:{group}:log-stream:{stream}" if stream else f"log-group:{group}:*"
    return [Check(f"logs:{action}", _arn("logs", region, account, resource))]


def _lambda(action: str, params: dict, region: str, account: str) -> list[Check]:
    from .enforcement import function_policy, is_in_process, service_acting

    name = params.get("FunctionName")
    if not name:
        return [Check(f"lambda:{action}")]
    arn = name if name.startswith("arn:") else _arn("lambda", region, account, f"function:{name}")
    unqualified = ":".join(arn.split(":")[:7])
    qualifier = params.get("Qualifier")
    resource = f"{unqualified}:{qualifier}" if qualifier and arn == unqualified else arn
    if action == "Invoke":  # the IAM action of the Invoke operation
        if not is_in_process(unqualified) and service_acting() is not None:
            return []  # no such function: Lambda answers ResourceNotFoundException to the service
        return [Check("lambda:InvokeFunction", resource, function_policy(unqualified))]
    checks = [Check(f"lambda:{action}", resource, function_policy(unqualified))]
    if action == "CreateFunction":
        checks.append(pass_role(params.get("Role"), "lambda.amazonaws.com"))
    return checks


def _kinesis(action: str, params: dict, region: str, account: str) -> list[Check]:
    stream = params.get("StreamARN") or (
        _arn("kinesis", region, account, f"stream/{params['StreamName']}") if params.get("StreamName") else "*")
    return [Check(f"kinesis:{action}", stream)]


def _scheduler(action: str, params: dict, region: str, account: str) -> list[Check]:
    """A schedule's ARN (``schedule/<group>/<name>``); creating or updating one passes its target's role
    (``iam:PassRole``, https://docs.aws.amazon.com/scheduler/latest/UserGuide/setting-up.html)."""
    name = params.get("Name") or params.get("name")  # in the path: /schedules/<name>
    resource = _arn("scheduler", region, account, f"schedule/{params.get('GroupName') or 'default'}/{name}") \
        if name else "*"
    checks = [Check(f"scheduler:{action}", resource)]
    if action in ("CreateSchedule", "UpdateSchedule"):
        checks.append(pass_role((params.get("Target") or {}).get("RoleArn"), "scheduler.amazonaws.com"))
    return checks


def s3_checks(action: str, bucket: str | None, key: str | None, query: dict[str, str]) -> list[Check]:
    """An S3 request: the action moto names it by, the bucket's ARN (a bucket action) or the object's
    (``arn:aws:s3:::<bucket>/<key>``), the bucket's policy, and for a listing ``s3:prefix``
    (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html)."""
    if not bucket:
        return [Check(f"s3:{action}")]
    resource = f"arn:aws:s3:::{bucket}/{key}" if key else f"arn:aws:s3:::{bucket}"
    context = {"s3:prefix": query.get("prefix", "")} if not key and action.startswith("List") else {}
    return [Check(f"s3:{action}", resource, _bucket_policy(bucket), context=context)]


def _bucket_policy(bucket: str) -> dict[str, Any] | None:
    from moto.s3.models import s3_backends

    account = s3_backends.bucket_accounts.get(bucket)
    found = s3_backends[account]["global"].buckets.get(bucket) if account else None
    return parsed(found.policy.decode("utf-8")) if found is not None and found.policy else None


_HANDLERS = {"kinesis": _kinesis, "dynamodb": _dynamodb, "states": _states, "kms": _kms, "secretsmanager": _secretsmanager,
             "events": _events, "sqs": _sqs, "sts": _sts, "iam": _iam, "logs": _logs, "lambda": _lambda,
             "scheduler": _scheduler}
