"""The embedded stack: the template's tables, functions and state machines on moto, in this process.

Reads ``template.yaml`` (nothing about changeflow's resources is written here), creates each DynamoDB
table with its key schema and TTL setting, the roles, keys, secrets and policies (``access``: IAM is
evaluated, moto_patches.iam), registers each function with its merged environment, its role's credentials
and its layers' code on the import path, and creates each state machine from its ASL file with the
``DefinitionSubstitutions`` resolved. Lambda invocations from the interpreter run the real handlers.
"""

from __future__ import annotations

import json
import logging
import os
import re
import warnings
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from ..common.project import project_root
from . import botocore_loader, buckets, clients, deploy, moto_patches, schedules
from .access import KEPT, Access
from .lambdas import Function, LambdaService
from .moto_patches.dynamodbstreams.retention import StreamClock
from .moto_patches.pipes import runner as pipe_runner
from .logging_controls import LoggingControls
from .moto_patches.iam import enforcement
from .moto_patches.scheduler.runs import Runs
from .moto_patches.stepfunctions.clock import Clock, Holds
from .moto_patches.stepfunctions.termination import ended_execution, forget_terminations, wait_for_termination
from .runtime import LAMBDA_RUNTIMES
from .runtime.dispatch import EmulatorRuntime
from .template import Template, load_yaml

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}
MOTO_CONFIG = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}
# What the embedded functions see besides the template's own variables: no X-Ray daemon runs here.
EMBEDDED_FUNCTION_ENV = {"POWERTOOLS_TRACE_DISABLED": "true"}
# Parameters without a default that choose how the tables are created: an embedded stack is always a new
# stack, so it takes the choice a new stack on AWS should make (a deploy that names another wins).
NEW_STACK_CHOICES = {"TimeIndexes": "true"}



class EmbeddedStack:
    """``with EmbeddedStack() as stack:`` - the whole application on moto, for as long as the block runs."""

    def __init__(
        self,
        root: Path | None = None,
        parameters: dict[str, str] | None = None,
        time_scale: float = 1.0,
        region: str = "us-east-1",
        stack_name: str = "changeflow",
        function_env: dict[str, str] | None = None,
        caches: bool = True,
        lambda_runtime: str | None = None,
    ):
        self.root = Path(root) if root else project_root()
        self.region = region
        body = load_yaml(self.root / "template.yaml", read_only=True).get("Parameters", {})
        choices = {name: value for name, value in NEW_STACK_CHOICES.items() if name in body and "Default" not in body[name]}
        self.template = Template(self.root / "template.yaml", stack_name, region, {**choices, **(parameters or {})})
        self.time_scale = time_scale
        self.function_env = {**EMBEDDED_FUNCTION_ENV, **(function_env or {})}
        self.caches = caches
        # "in-process" (default) or "emulator" (changeflow.local.runtime); CHANGEFLOW_LAMBDA_RUNTIME sets the default
        self.lambda_runtime = lambda_runtime or os.environ.get("CHANGEFLOW_LAMBDA_RUNTIME") or LAMBDA_RUNTIMES[0]
        if self.lambda_runtime not in LAMBDA_RUNTIMES:
            raise ValueError(f"Lambda runtime {self.lambda_runtime!r}: expected in-process or emulator")
        self._mock = None
        self.lambdas: LambdaService | None = None
        self.state_machines: dict[str, str] = {}  # logical id -> ARN
        self._version_ids: dict[str, str] | None = None  # SAM's version logical ids of the deployed release
        self.outputs: dict[str, Any] = {}
        self._clients: dict[str, Any] = {}
        self.access: Access | None = None

    # --- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> "EmbeddedStack":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "EmbeddedStack":
        from moto import mock_aws

        # moto logs every failed state at ERROR with its internals; the execution history says it better.
        logging.getLogger("moto.stepfunctions.parser").setLevel(logging.CRITICAL)
        self.lambdas = LambdaService(self._layer_dirs())
        if self.caches:
            botocore_loader.install()  # before the mock's new default session
        moto_patches.install(self.lambdas.before_call, caches=self.caches, invoke_request=self.lambdas.invoke_request)
        Clock.scale = self.time_scale
        self._mock = mock_aws(config=MOTO_CONFIG)
        for key, value in {**FAKE_CREDENTIALS, "AWS_DEFAULT_REGION": self.region}.items():
            os.environ.setdefault(key, value)
        self._mock.start()  # which sets its credentials in os.environ
        enforcement.forget()
        forget_terminations()
        Holds.clear()  # a window a campaign left open on a stack that is gone (names repeat across stacks)
        StreamClock.reset()  # each stack's streams start at the real time
        try:
            if self.lambda_runtime == "emulator":
                self.lambdas.runtime = EmulatorRuntime(self.root, self.region, self._layer_dirs()).start()
            self.lambdas.async_delay_scale = self.time_scale
            self.access = Access(self.template, self._client, KEPT if self.lambda_runtime == "emulator" else None)
            self._create_tables()
            self._create_queues_and_buses()
            self._create_log_groups()
            self.access.create_keys_and_secrets()
            self.access.create_roles()
            self._register_functions()
            self.access.create_permissions()
            self._create_buckets()
            self._create_state_machines()
            self._create_event_rules()
            self._create_data_streams()
            self._create_pipes()
            self._create_schedules()
            self.outputs = self.template.outputs()
            self._publish_outputs()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        Runs.stop_all()  # no scheduled invocation outlives the mock it runs against
        if self.lambdas is not None and self.lambdas.runtime is not None:
            self.lambdas.runtime.stop()
            self.lambdas.runtime = None
        pipe_runner.stop_all()  # before the mock stops: a pipe's thread must never call beyond it
        if self.lambdas is not None:
            self.lambdas.drain(5.0)  # the asynchronous invocations (the rule's target) still running
        if self._mock is not None:
            self._mock.stop()  # which puts back what it found in os.environ
            self._mock = None
            forget_terminations()
            Holds.clear()
            Clock.scale = 1.0
            self._clients.clear()

    def client(self, service: str):
        return boto3.client(service, region_name=self.region, config=Config(retries={"mode": "standard"}))

    def _client(self, service: str):
        """The stack's client of a service for its resources: the process's (``clients``), or new if not caches."""
        if service not in self._clients:
            self._clients[service] = (clients.client(service, self.region, retries={"mode": "standard"})
                                      if self.caches else self.client(service))
        return self._clients[service]

    # --- resources from the template ------------------------------------------------------------
    def _layer_dirs(self, template: Template | None = None, root: Path | None = None) -> list[Path]:
        template, root = template or self.template, root or self.root
        layers = template.of_type("AWS::Serverless::LayerVersion")
        return [root / template.resolve(spec["Properties"]["ContentUri"]) for spec in layers.values()]

    def _create_tables(self, only_new_since: Template | None = None) -> None:
        dynamodb = self._client("dynamodb")
        for logical_id, spec in self.template.of_type("AWS::DynamoDB::Table").items():
            if only_new_since is not None and logical_id in only_new_since.of_type("AWS::DynamoDB::Table"):
                continue
            props = self.template.resolve(spec["Properties"])
            name = props.get("TableName") or self.template.physical_name(logical_id)
            kwargs = {
                "TableName": name,
                "KeySchema": props["KeySchema"],
                "AttributeDefinitions": props["AttributeDefinitions"],
                "BillingMode": props.get("BillingMode", "PROVISIONED"),
            }
            if kwargs["BillingMode"] == "PROVISIONED":
                kwargs["ProvisionedThroughput"] = props["ProvisionedThroughput"]
            for optional in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
                if optional in props:
                    kwargs[optional] = props[optional]
            if "StreamSpecification" in props:  # CloudFormation names the view type; the API enables the stream too
                kwargs["StreamSpecification"] = {"StreamEnabled": True, **props["StreamSpecification"]}
            if "SSESpecification" in props:
                sse = props["SSESpecification"]
                kwargs["SSESpecification"] = {"Enabled": bool(sse.get("SSEEnabled")),
                                              **{k: sse[k] for k in ("SSEType", "KMSMasterKeyId") if k in sse}}
            if "DeletionProtectionEnabled" in props:
                kwargs["DeletionProtectionEnabled"] = str(props["DeletionProtectionEnabled"]).lower() == "true"
            created = dynamodb.create_table(**kwargs)["TableDescription"]
            if created.get("LatestStreamArn"):
                self.template.attributes[f"{logical_id}.StreamArn"] = created["LatestStreamArn"]
            ttl = props.get("TimeToLiveSpecification")
            if ttl and str(ttl.get("Enabled")).lower() == "true":
                dynamodb.update_time_to_live(
                    TableName=name,
                    TimeToLiveSpecification={"AttributeName": ttl["AttributeName"], "Enabled": True},
                )

    def _create_queues_and_buses(self) -> None:
        for logical_id in self.template.of_type("AWS::SQS::Queue"):
            self._client("sqs").create_queue(QueueName=self.template.physical_name(logical_id))
        for logical_id in self.template.of_type("AWS::Events::EventBus"):
            self._client("events").create_event_bus(Name=self.template.physical_name(logical_id))

    def _create_log_groups(self, only_new_since: Template | None = None) -> None:
        """The template's log groups, so that a state machine's LoggingConfiguration has somewhere to deliver
        its execution log (an Express execution's only history)."""
        logs = self._client("logs")
        for logical_id in self.template.of_type("AWS::Logs::LogGroup"):
            if only_new_since is not None and logical_id in only_new_since.of_type("AWS::Logs::LogGroup"):
                continue
            logs.create_log_group(logGroupName=self.template.physical_name(logical_id))

    def _create_event_rules(self) -> None:
        """EventBridge rules: SAM ``EventBridgeRule`` events of state machines and functions, and plain
        ``AWS::Events::Rule`` resources, with their targets (moto_patches.events.targets delivers to Step Functions)."""
        events = self._client("events")
        rules = []
        for kind in ("AWS::Serverless::StateMachine", "AWS::Serverless::Function"):
            for logical_id, spec in self.template.of_type(kind).items():
                for event_id, event in spec.get("Properties", {}).get("Events", {}).items():
                    if event["Type"] not in ("EventBridgeRule", "CloudWatchEvent"):
                        continue
                    props = self.template.resolve(event["Properties"])
                    target = {"Id": f"{logical_id}{event_id}Target", "Arn": self.template.arn(logical_id)}
                    for key in ("InputPath", "Input", "RetryPolicy", "DeadLetterConfig", "InputTransformer"):
                        if key in props:
                            target[key] = props[key]
                    rules.append((f"{logical_id}{event_id}", props.get("EventBusName", "default"),
                                  props["Pattern"], [target]))
        for logical_id, spec in self.template.of_type("AWS::Events::Rule").items():
            props = self.template.resolve(spec["Properties"])
            rules.append((self.template.physical_name(logical_id), props.get("EventBusName", "default"),
                          props["EventPattern"], props.get("Targets", [])))
        for name, bus, pattern, targets in rules:
            events.put_rule(Name=name, EventBusName=bus, EventPattern=json.dumps(pattern), State="ENABLED")
            events.put_targets(Rule=name, EventBusName=bus, Targets=targets)

    def _create_data_streams(self) -> None:
        """The template's Kinesis streams (the feed's target with ``FeedTarget=kinesis``)."""
        for logical_id, spec in self.template.of_type("AWS::Kinesis::Stream").items():
            props = self.template.resolve(spec.get("Properties", {}))
            kwargs = {"StreamName": self.template.physical_name(logical_id)}
            if "StreamModeDetails" in props:
                kwargs["StreamModeDetails"] = props["StreamModeDetails"]
            if props.get("StreamModeDetails", {}).get("StreamMode") != "ON_DEMAND":
                kwargs["ShardCount"] = int(props.get("ShardCount", 1))
            self._client("kinesis").create_stream(**kwargs)

    def _create_pipes(self) -> None:
        """The template's EventBridge pipes, as CreatePipe takes them; moto_patches.pipes runs them (reads each
        source, filters, batches, enriches and delivers, as Pipes does)."""
        pipes = self._client("pipes")
        for logical_id, spec in self.template.of_type("AWS::Pipes::Pipe").items():
            props = self.template.resolve(spec["Properties"])
            kwargs = {"Name": props.get("Name") or self.template.physical_name(logical_id), "RoleArn": props["RoleArn"],
                      "Source": props["Source"], "Target": props["Target"],
                      "DesiredState": props.get("DesiredState", "RUNNING")}
            for optional in ("Description", "SourceParameters", "Enrichment", "EnrichmentParameters",
                             "TargetParameters"):
                if optional in props:
                    kwargs[optional] = props[optional]
            pipes.create_pipe(**kwargs)

    def stop_pipes(self) -> None:
        """StopPipe on the template's pipes: for a measurement of the workflow alone. On AWS the feed's pipe and
        its enrichment run beside the workflow; here they would share this process and its invoke lock with it
        (``changeflow.cost.feed`` measures and prices the feed on its own)."""
        pipes = self._client("pipes")
        for logical_id, spec in self.template.of_type("AWS::Pipes::Pipe").items():
            pipes.stop_pipe(Name=self.template.resolve(spec["Properties"]).get("Name")
                            or self.template.physical_name(logical_id))

    def stop_schedules(self) -> None:
        """The stack's schedules (the digest's) ``DISABLED``, for the workflow alone, as ``stop_pipes``."""
        scheduler = self._client("scheduler")
        for found in (scheduler.get_schedule(Name=s["Name"]) for s in scheduler.list_schedules()["Schedules"]):
            scheduler.update_schedule(State="DISABLED", **{key: found[key] for key in (
                "Name", "Target", "ScheduleExpression", "FlexibleTimeWindow")})

    def _create_buckets(self) -> None:
        buckets.create(self.template, self._client("s3"))

    def _create_schedules(self) -> None:
        schedules.create(self.template, self._client("scheduler"))

    def _register_functions(self) -> None:
        for logical_id in self.template.of_type("AWS::Serverless::Function"):
            self._register_function(self.template, self.root, logical_id)

    def _function_of(self, template: Template, root: Path, logical_id: str) -> Function:
        props = template.function_properties(logical_id)
        environment = {k: str(v) for k, v in props.get("Environment", {}).get("Variables", {}).items()}
        controls = LoggingControls.of(props)
        environment.update(controls.environment())  # what Lambda sets for the LoggingConfig
        environment.update(self.function_env)
        environment.update(
            AWS_LAMBDA_FUNCTION_MEMORY_SIZE=str(props.get("MemorySize", 128)),
            AWS_REGION=self.region,
        )
        if self.access is not None:  # its role's credentials, as Lambda gives them
            environment.update(self.access.credentials(logical_id, template.arn(logical_id)))
        return Function(
            logical_id=logical_id,
            name=props.get("FunctionName") or template.physical_name(logical_id),
            arn=template.arn(logical_id),
            code_dir=root / props["CodeUri"],
            handler=props["Handler"],
            environment=environment,
            memory_mb=int(props.get("MemorySize", 128)),
            timeout_s=int(props.get("Timeout", 3)),
            layer_dirs=tuple(self._layer_dirs(template, root)),
            event_invoke=_event_invoke(props.get("EventInvokeConfig")),
            runtime=str(props.get("Runtime", "")),
            controls=controls,
        )

    def _register_function(self, template: Template, root: Path, logical_id: str) -> Function:
        """The function's ``$LATEST``, and with SAM's ``AutoPublishAlias`` its version (``template.versions``)
        and the alias: what ``!Ref Function.Version`` and ``.Alias`` name."""
        function = self._function_of(template, root, logical_id)
        self.lambdas.add(function)
        alias = template.function_properties(logical_id).get("AutoPublishAlias")
        if alias:
            version = self.lambdas.publish(function, alias)
            if version != template.versions.get(logical_id, "1"):
                raise RuntimeError(f"{logical_id}: published version {version}, the template names "
                                   f"{template.versions.get(logical_id, '1')}")
        return function

    # --- a deploy into the running stack ----------------------------------------------------------
    def deploy(self, root: Path | None = None, parameters: dict[str, str] | None = None) -> dict[str, str]:
        """``sam deploy`` of the template, functions and ASL at ``root`` (another checkout: the next release;
        this one by default) with ``parameters`` changed (the others keep their values, as ``sam deploy``
        does), into this running stack, as CloudFormation updates it. A function with ``AutoPublishAlias``
        publishes a new version exactly when AWS would (``changeflow.local.deploy.published``: SAM gives its
        version a new logical id, or CloudFormation replaces the version because its Description resolves to
        another value); a published version is immutable and kept (``DeletionPolicy``/``UpdateReplacePolicy:
        Retain``). Every changed function's ``$LATEST`` takes the new code and configuration. Tables and log
        groups the new parameters bring in are created (the stack's Outputs follow). Then every state machine
        gets the new definition (UpdateStateMachine: running executions keep the definition they started
        with). Returns the version each function's ``.Version`` names now."""
        if self.lambda_runtime == "emulator":
            raise RuntimeError("deploy: the embedded stack deploys new code in-process only")
        root = Path(root) if root else self.root
        current = {f.logical_id: f for f in self.lambdas.functions.values()}
        versions = {lid: self.template.versions.get(lid, "1") for lid in current
                    if self.template.function_properties(lid).get("AutoPublishAlias")}
        template = Template(root / "template.yaml", self.template.stack_name, self.region,
                            {**self.template.overrides, **(parameters or {})}, versions=dict(versions),
                            physical=self.template.physical)
        _refuse_replacements(self.template, template)
        deploy.carry_attributes(self.template, template)
        self.access.deploy(template)  # its new roles and secrets, before its functions take their credentials
        before = self._version_ids or deploy.version_ids(self.template, self.root)
        after = deploy.version_ids(template, root)
        for lid in sorted(deploy.published(self.template, template, before, after)):
            template.versions[lid] = str(len(self.lambdas.versions.get(template.physical_name(lid), {})) + 1)
        for lid in template.of_type("AWS::Serverless::Function"):
            function = self._function_of(template, root, lid)
            if lid in current and _release_of(function) == _release_of(current[lid]):
                continue
            self.lambdas.add(function)  # $LATEST
            if template.versions.get(lid) not in (None, versions.get(lid)):
                self.lambdas.publish(function, template.function_properties(lid)["AutoPublishAlias"])
        previous, self.template, self.root, self._version_ids = self.template, template, root, after
        self._create_tables(only_new_since=previous)
        self._create_log_groups(only_new_since=previous)
        self.outputs = template.outputs()
        self._publish_outputs(update=True)
        sfn = self._client("stepfunctions")
        for logical_id, spec in template.of_type("AWS::Serverless::StateMachine").items():
            sfn.update_state_machine(stateMachineArn=self.state_machines[logical_id],
                                     definition=definition_of(template, root, spec)[1])
        return dict(template.versions)

    def _create_state_machines(self) -> None:
        sfn = self._client("stepfunctions")
        for logical_id, spec in self.template.of_type("AWS::Serverless::StateMachine").items():
            props, definition = definition_of(self.template, self.root, spec)
            arn = sfn.create_state_machine(
                name=self.template.physical_name(logical_id),
                definition=definition,
                roleArn=f"arn:aws:iam::{self.template.ref('AWS::AccountId')}:role/{logical_id}Role",
                type=props.get("Type", "STANDARD"),
                tracingConfiguration={"enabled": bool(props.get("Tracing", {}).get("Enabled", False))},
                **logging_configuration(props.get("Logging")),
            )["stateMachineArn"]
            self.state_machines[logical_id] = arn

    def _publish_outputs(self, update: bool = False) -> None:
        """Record the stack's Outputs as a CloudFormation stack of the same name, so that a client finds
        the state machine and tables through ``DescribeStacks`` here exactly as on AWS (``update``: after a
        deploy)."""
        body = {
            "Resources": {"EmbeddedStack": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
            "Outputs": {name: {"Value": str(value)} for name, value in self.outputs.items()},
        }
        with warnings.catch_warnings():  # moto creates no resource for the marker, and says so
            warnings.simplefilter("ignore", UserWarning)
            cloudformation = self._client("cloudformation")
            (cloudformation.update_stack if update else cloudformation.create_stack)(
                StackName=self.template.stack_name, TemplateBody=json.dumps(body))

    # --- conveniences for tests and tools -------------------------------------------------------
    # block until an execution of this stack has ended (False on timeout); what DescribeExecution answers of it
    wait_for_termination, ended_execution = staticmethod(wait_for_termination), staticmethod(ended_execution)

    def workflow_functions(self) -> set[str]:
        """The functions the state machines invoke (their ARNs in ``DefinitionSubstitutions``), by logical id:
        a schedule (the digest) and a pipe's enrichment (the feed) run others beside the workflow."""
        named = " ".join(str(value) for spec in self.template.of_type("AWS::Serverless::StateMachine").values()
                         for value in self.template.resolve(spec["Properties"]).get("DefinitionSubstitutions",
                                                                                      {}).values())
        return {f.logical_id for f in self.lambdas.functions.values()
                if re.search(re.escape(f.arn) + r"(?![\w-])", named)}

    def scheduled_functions(self) -> set[str]:
        """The functions a schedule runs: they run between changes, on the stack's time scale."""
        return schedules.scheduled_functions(self.template)

    def function(self, logical_id: str) -> Function:
        return next(f for f in self.lambdas.functions.values() if f.logical_id == logical_id)

    def warm(self) -> None:
        """Import every handler now (their cold starts) rather than on first invocation."""
        for function in self.lambdas.functions.values():
            self.lambdas.load(function)


def _refuse_replacements(before: Template, after: Template) -> None:
    """A deploy that would make CloudFormation replace a table or a state machine (a new key schema, another
    WorkflowType) is not modelled here: refused by name rather than half done."""
    for kind in ("AWS::DynamoDB::Table", "AWS::Serverless::StateMachine"):
        for logical_id, spec in after.of_type(kind).items():
            old = before.of_type(kind).get(logical_id)
            if old is None:
                continue
            # CloudFormation replaces a table for a new KeySchema, TableName or LocalSecondaryIndexes
            keys = (("KeySchema", "TableName", "LocalSecondaryIndexes") if kind == "AWS::DynamoDB::Table"
                    else ("Type", "Name"))
            changed = [k for k in keys
                       if before.resolve(old["Properties"].get(k)) != after.resolve(spec["Properties"].get(k))]
            if changed:
                raise RuntimeError(f"deploy: {logical_id}.{changed[0]} changes, which replaces {logical_id} "
                                   "(not modelled by the embedded stack)")


def _release_of(function: Function) -> tuple:
    """What a function runs: its code and its layers' (by content), handler and configuration."""
    return (deploy.digest(function.code_dir, *function.layer_dirs), function.handler, function.runtime,
            tuple(sorted(function.environment.items())), function.memory_mb, function.timeout_s)


def _event_invoke(config: dict[str, Any] | None) -> dict[str, Any]:
    """SAM's ``EventInvokeConfig``: the retries and the on-failure destination of an asynchronous invocation."""
    config = config or {}
    on_failure = ((config.get("DestinationConfig") or {}).get("OnFailure") or {}).get("Destination")
    return {"MaximumRetryAttempts": int(config.get("MaximumRetryAttempts", 2)),
            **({"OnFailure": on_failure} if on_failure else {})}


def logging_configuration(logging: dict[str, Any] | None) -> dict[str, Any]:
    """SAM's ``Logging`` property as CreateStateMachine's ``loggingConfiguration`` argument (none if absent)."""
    if not logging:
        return {}
    return {"loggingConfiguration": {
        "level": logging.get("Level", "OFF"),
        "includeExecutionData": str(logging.get("IncludeExecutionData", False)).lower() == "true",
        "destinations": [{"cloudWatchLogsLogGroup": {"logGroupArn": d["CloudWatchLogsLogGroup"]["LogGroupArn"]}}
                         for d in logging.get("Destinations", [])],
    }}


def definition_of(template: Template, root: Path, spec: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A state machine's properties, resolved, and its definition with its ``DefinitionSubstitutions`` made."""
    props = template.resolve(spec["Properties"])
    text = (root / props["DefinitionUri"]).read_text(encoding="utf-8")
    return props, substitute(text, props.get("DefinitionSubstitutions", {}))


def substitute(definition: str, substitutions: dict[str, Any]) -> str:
    """``${Name}`` -> value, as ``DefinitionSubstitutions`` does; an unknown placeholder is an error."""
    def replace(match):
        name = match.group(1)
        if name not in substitutions:
            raise KeyError(f"definition placeholder ${{{name}}} has no DefinitionSubstitutions entry")
        return str(substitutions[name])

    text = re.sub(r"\$\{([A-Za-z0-9_]+)\}", replace, definition)
    json.loads(text)
    return text
