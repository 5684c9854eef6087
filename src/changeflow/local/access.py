"""The template's access control on the embedded stack (issue 33 item 2), so that moto_patches.iam evaluates
what AWS would: the roles, the ``AWS::IAM::Policy`` resources attached to them, each function's session of its
role (the credentials Lambda gives a function, with ``lambda:SourceFunctionArn`` in their context), the
functions' resource-based policies (``AWS::Lambda::Permission``), the queues' and event buses' policies, and the
KMS keys and Secrets Manager secrets with their policies.

The role SAM makes for a function or a state machine without a ``Role`` is made as SAM makes it
(https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/sam-specification-generated-resources-function.html):
``<logical id>Role``, trusting ``lambda.amazonaws.com`` (``states.amazonaws.com``), with the ``Policies``
statements inline, ``AWSLambdaBasicExecutionRole`` (and ``AWSXrayWriteOnlyAccess`` with tracing) attached, and
for an ``EventInvokeConfig`` destination the permission to send to it (``sqs:SendMessage`` for a queue,
https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/sam-property-function-eventinvokeconfiguration.html),
and for a ``ScheduleV2`` event without ``RoleArn`` the role Scheduler assumes (``<logical id><event id>Role``).
The managed policies are attached where moto has them loaded; they grant CloudWatch Logs and X-Ray writes, which
the embedded functions do not make. SAM's permissions for API events are not made: the embedded REST API
invokes its functions itself, as API Gateway does under them.
"""

from __future__ import annotations

import json
import secrets
import string
import threading
from typing import Any

from .moto_patches.iam import enforcement
from .template import ACCOUNT, Template

SESSION_SECONDS = 12 * 3600  # a function's credentials: Lambda refreshes them; the embedded stack never expires them


class Access:
    """The access control of one embedded stack: ``create_keys_and_secrets``, ``create_roles`` before the
    functions, ``credentials(logical_id)`` for each, ``create_permissions`` after them."""

    def __init__(self, template: Template, client, kept: "KeptIdentity | None" = None):
        self.template, self.client = template, client
        self._sessions: dict[str, dict[str, str]] = {}
        self.kept = kept  # the identity an earlier stack of this process gave (the emulator's: KEPT), or None

    def roles(self) -> dict[str, dict[str, Any]]:
        """Role logical id -> {trust, inline policies, managed policy ARNs}, resolved: the template's
        ``AWS::IAM::Role`` resources and the roles SAM makes."""
        found = {}
        for logical_id, spec in self.template.of_type("AWS::IAM::Role").items():
            props = self.template.resolve(spec["Properties"])
            found[logical_id] = {"trust": props["AssumeRolePolicyDocument"], "managed": props.get("ManagedPolicyArns", []),
                                 "inline": {p["PolicyName"]: p["PolicyDocument"] for p in props.get("Policies", [])}}
        for kind, service in (("AWS::Serverless::Function", "lambda"), ("AWS::Serverless::StateMachine", "states")):
            for logical_id, spec in self.template.of_type(kind).items():
                found.update(self._schedule_roles(logical_id, spec, service))
                role = f"{logical_id}Role"
                if not self.template.generated_role(role):
                    continue
                props = self.template.function_properties(logical_id) if service == "lambda" else \
                    self.template.resolve(spec["Properties"])
                statements = [s for policy in props.get("Policies", []) if isinstance(policy, dict)
                              for s in policy.get("Statement", [])]
                managed = [p for p in props.get("Policies", []) if isinstance(p, str)]
                if service == "lambda":
                    managed.append("arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole")
                    destination = ((props.get("EventInvokeConfig") or {}).get("DestinationConfig") or {})
                    for outcome in destination.values():
                        if outcome.get("Type") == "SQS":
                            statements.append({"Effect": "Allow", "Action": "sqs:SendMessage",
                                               "Resource": outcome["Destination"]})
                tracing = props.get("Tracing")  # a function's "Active", a state machine's {"Enabled": true}
                if tracing == "Active" or (isinstance(tracing, dict) and str(tracing.get("Enabled")).lower() == "true"):
                    managed.append("arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess")
                found[role] = {"trust": {"Version": "2012-10-17", "Statement": [
                    {"Effect": "Allow", "Principal": {"Service": [f"{service}.amazonaws.com"]},
                     "Action": ["sts:AssumeRole"]}]},
                    "managed": managed,
                    "inline": {f"{role}Policy0": {"Statement": statements}} if statements else {}}
        return found

    def _schedule_roles(self, logical_id: str, spec: dict[str, Any], service: str) -> dict[str, dict[str, Any]]:
        """The role SAM makes for a ``ScheduleV2`` event without ``RoleArn``: ``<logical id><event id>Role``,
        trusting ``scheduler.amazonaws.com``, allowed to invoke its function (or start its state machine) only
        (https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/sam-property-function-schedulev2.html)."""
        found = {}
        for event_id, event in (spec.get("Properties", {}).get("Events") or {}).items():
            if event.get("Type") != "ScheduleV2" or event.get("Properties", {}).get("RoleArn"):
                continue
            target = self.template.arn(logical_id)
            statement = {"Action": "lambda:InvokeFunction", "Effect": "Allow", "Resource": target} \
                if service == "lambda" else {"Action": "states:StartExecution", "Effect": "Allow", "Resource": target}
            name = f"{logical_id}{event_id}"
            found[f"{name}Role"] = {"trust": {"Version": "2012-10-17", "Statement": [
                {"Action": ["sts:AssumeRole"], "Effect": "Allow", "Principal": {"Service": ["scheduler.amazonaws.com"]}}]},
                "managed": [], "inline": {f"{name}{'Lambda' if service == 'lambda' else 'StartExecution'}Policy":
                                          {"Statement": [statement]}}}
        return found

    # --- roles ------------------------------------------------------------------------------------------
    def create_roles(self) -> None:
        """Every role with its trust and inline policies; a role that exists (a deploy) gets them anew. Made in
        moto's IAM backend itself, as CloudFormation makes them (not a client's requests, which were about half of
        the CPU a stack took to start: 0.34 s, now 0.16 s, https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-iam-role.html);
        each document is validated as IAM's API validates it."""
        from moto.iam.models import iam_backends

        iam = iam_backends[ACCOUNT]["aws"]
        existing = {role.name for role in iam.roles.values()}
        managed = {policy.arn: policy for policy in iam.managed_policies.values()}
        for logical_id, role in self.roles().items():
            name = self.template.physical_name(logical_id)
            trust = json.dumps(role["trust"])
            if name in existing:
                iam.update_assume_role_policy(name, trust)
            else:
                iam.create_role(name, trust, "/", None, "", [], None)
            for policy_name, document in role["inline"].items():
                iam.put_role_policy(name, policy_name, _versioned(document))
            for arn in role["managed"]:
                if arn in managed:  # else an AWS managed policy moto has not loaded (see the module's docstring)
                    managed[arn].attach_to(iam.get_role(name))
        for logical_id, spec in self.template.of_type("AWS::IAM::Policy").items():
            props = self.template.resolve(spec["Properties"])
            for role in props.get("Roles", []):
                iam.put_role_policy(role, props["PolicyName"], json.dumps(props["PolicyDocument"]))

    def deploy(self, template: Template) -> None:
        """A new release's template: its new roles, keys and secrets, every role's policies and every
        function's permissions as it writes them (what exists keeps its physical id)."""
        self.template = template
        self.create_keys_and_secrets()
        self.create_roles()
        self.create_permissions()

    def role_arn(self, logical_id: str) -> str:
        """The ARN of a function's execution role (its ``Role``, else the one SAM makes)."""
        role = self.template.function_properties(logical_id).get("Role")
        return role if isinstance(role, str) else self.template.arn(f"{logical_id}Role")

    def credentials(self, logical_id: str, function_arn: str) -> dict[str, str]:
        """The environment variables of the function's credentials: a session of its role, as Lambda assumes
        it, which carries the function's ARN (``lambda:SourceFunctionArn``)."""
        if logical_id not in self._sessions:
            from moto.sts.models import sts_backends

            session = sts_backends[ACCOUNT]["aws"].assume_role(
                region_name=self.template.region, role_session_name=function_arn.split(":")[-1],
                role_arn=self.role_arn(logical_id), policy="", duration=SESSION_SECONDS, external_id="")
            if self.kept is not None:
                self.kept.session(session)
            enforcement.credential_context(session.access_key_id, **{"lambda:SourceFunctionArn": function_arn})
            self._sessions[logical_id] = {"AWS_ACCESS_KEY_ID": session.access_key_id,
                                          "AWS_SECRET_ACCESS_KEY": session.secret_access_key,
                                          "AWS_SESSION_TOKEN": session.session_token}
        return dict(self._sessions[logical_id])

    # --- keys and secrets -------------------------------------------------------------------------------------
    def create_keys_and_secrets(self) -> None:
        """KMS keys with their key policies, then secrets (a ``GenerateSecretString`` made here, as
        CloudFormation asks Secrets Manager to) and their resource policies."""
        kms, sm = self.client("kms"), self.client("secretsmanager")
        for logical_id, spec in self.template.of_type("AWS::KMS::Key").items():
            if logical_id in self.template.physical:
                continue
            props = self.template.resolve(spec["Properties"])
            key = kms.create_key(Description=props.get("Description", ""), Policy=json.dumps(props["KeyPolicy"]),
                                 BypassPolicyLockoutSafetyCheck=True)["KeyMetadata"]
            self.template.physical[logical_id] = {"Ref": key["KeyId"], "Arn": key["Arn"]}
        created_now = set()
        for logical_id, spec in self.template.of_type("AWS::SecretsManager::Secret").items():
            if logical_id in self.template.physical:
                continue
            created_now.add(logical_id)
            props = self.template.resolve(spec["Properties"])
            name = props.get("Name") or self.template.physical_name(logical_id)
            created = sm.create_secret(Name=name, KmsKeyId=props.get("KmsKeyId", ""),
                                       SecretString=self._secret_string(name, props))
            self.template.physical[logical_id] = {"Ref": created["ARN"], "Id": created["ARN"]}
        for spec in self.template.of_type("AWS::SecretsManager::ResourcePolicy").values():
            if spec["Properties"]["SecretId"].get("Ref") not in created_now:
                continue  # on AWS a deploy would set it again; here nothing may change it (its own denies)
            props = self.template.resolve(spec["Properties"])
            sm.put_resource_policy(SecretId=props["SecretId"], ResourcePolicy=json.dumps(props["ResourcePolicy"]),
                                   BlockPublicPolicy=str(props.get("BlockPublicPolicy", "false")).lower() == "true")

    def _secret_string(self, name: str, props: dict[str, Any]) -> str:
        if self.kept is None or "SecretString" in props:
            return _generated(props)
        return self.kept.secret(name, props)

    # --- the functions' resource-based policies ------------------------------------------------------------
    def create_permissions(self) -> None:
        policies: dict[str, list[dict[str, Any]]] = {self.template.arn(f): [] for f in
                                                     self.template.of_type("AWS::Serverless::Function")}
        for logical_id, spec in self.template.of_type("AWS::Lambda::Permission").items():
            props = self.template.resolve(spec["Properties"])
            function = props["FunctionName"]
            arn = function if function.startswith("arn:") else \
                f"arn:aws:lambda:{self.template.region}:{ACCOUNT}:function:{function}"
            condition: dict[str, Any] = {}
            if props.get("SourceArn"):
                condition["ArnLike"] = {"AWS:SourceArn": props["SourceArn"]}
            if props.get("SourceAccount"):
                condition["StringEquals"] = {"AWS:SourceAccount": props["SourceAccount"]}
            principal = props["Principal"]
            named = {"Service": principal} if principal.endswith(".amazonaws.com") else {"AWS": principal}
            policies.setdefault(arn, []).append({"Sid": logical_id, "Effect": "Allow", "Principal": named,
                                                 "Action": props["Action"], "Resource": arn,
                                                 **({"Condition": condition} if condition else {})})
        for arn, statements in policies.items():
            enforcement.set_function_policy(arn, statements)
        sqs = self.client("sqs")
        for spec in self.template.of_type("AWS::SQS::QueuePolicy").values():  # a queue's policy
            props = self.template.resolve(spec["Properties"])
            for url in props["Queues"]:
                sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(props["PolicyDocument"])})
        events = self.client("events")
        buses: dict[str, list[dict[str, Any]]] = {}  # a bus's policy: the statements of its EventBusPolicy resources
        for spec in self.template.of_type("AWS::Events::EventBusPolicy").values():
            props = self.template.resolve(spec["Properties"])
            buses.setdefault(props.get("EventBusName", "default"), []).append(
                {"Sid": props["StatementId"], **props["Statement"]})
        for bus, statements in buses.items():
            events.put_permission(EventBusName=bus, Policy=json.dumps({"Version": "2012-10-17", "Statement": statements}))


def _versioned(document: dict[str, Any]) -> str:
    """A policy document as moto's IAM takes it: SAM writes its statements without ``Version``, which IAM
    reads as 2008-10-17 and moto refuses; the two differ only in policy variables, which these do not use."""
    return json.dumps({"Version": "2012-10-17", **document})


def _generated(props: dict[str, Any]) -> str:
    """A secret's ``GenerateSecretString`` value (its length and character rules), or its ``SecretString``."""
    if "SecretString" in props:
        return props["SecretString"]
    rules = props.get("GenerateSecretString") or {}
    alphabet = string.ascii_letters + string.digits
    if str(rules.get("ExcludePunctuation", "false")).lower() != "true":
        alphabet += "!#$%&()*+,-.:;<=>?@[]^_{|}~"
    return "".join(secrets.choice(alphabet) for _ in range(int(rules.get("PasswordLength", 32))))


class KeptIdentity:
    """What a stack issues at random and an execution environment keeps from its Init: each function's role
    session (its credentials, in the runtime's environment and in its clients) and each generated secret (the
    seal's key, read at the first use), issued again alike to every later stack of this process made from the
    same template. The emulator's warm environments outlive a stack (``runtime.dispatch``); with these kept,
    one is reused by the next stack as Lambda reuses a warm environment of an unchanged function, and what its
    handler holds is still this stack's: its role's session, valid here (the new stack's STS issued it again,
    with the function's context keys), and the secret's value. Without it every stack's new credentials made
    every environment cold again (145 runtime starts in the workflow suite, about 0.3 CPU s each)."""

    def __init__(self) -> None:
        self.sessions: dict[tuple[str, str], tuple[str, str, str]] = {}
        self.secrets: dict[tuple[str, str], str] = {}
        self.lock = threading.Lock()

    def session(self, session) -> None:
        """moto's new session of a role (``AssumedRole``) given the keys this process issued that role session
        first, in STS and in IAM's temporary keys alike (so that every check sees one identity)."""
        from moto.iam.models import iam_backends

        with self.lock:
            kept = self.sessions.setdefault((session.role_arn, session.session_name), (
                session.access_key_id, session.secret_access_key, session.session_token))
        if kept == (session.access_key_id, session.secret_access_key, session.session_token):
            return
        keys = iam_backends[ACCOUNT]["aws"].access_keys
        keys.pop(session.access_key.physical_resource_id, None)
        session.access_key.access_key_id, session.access_key.secret_access_key = kept[:2]
        keys[session.access_key.physical_resource_id] = session.access_key
        session.access_key_id, session.secret_access_key, session.session_token = kept

    def secret(self, name: str, props: dict[str, Any]) -> str:
        """The value generated first for the secret of this name and rules in this process."""
        with self.lock:
            key = (name, json.dumps(props.get("GenerateSecretString") or {}, sort_keys=True))
            return self.secrets.setdefault(key, _generated(props))


KEPT = KeptIdentity()
