"""Reading the SAM template the way CloudFormation would, for the embedded stack: parameters with defaults
or overrides, conditions, ``Globals``, and the intrinsics the template uses (``!Ref``, ``!GetAtt``,
``!Sub``, ``!If``, ``!Equals``, ``!Not``, ``!And``, ``!Or``, ``!Join``, ``!Select``, ``!Split``).

Nothing here knows changeflow's resources: physical names and ARNs follow from the logical ids.
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ACCOUNT = "123456789012"
NO_VALUE = object()
UNSET = object()  # a parameter without a default that no override gives: an error where it is used


class TemplateError(Exception):
    """The template uses something the embedded stack cannot resolve."""


class _Tag:
    def __init__(self, name: str, value: Any):
        self.name, self.value = name, value


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml's parser when PyYAML has it: ~10x faster
    pass


def _construct(loader: yaml.Loader, suffix: str, node: yaml.Node) -> dict:
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {name: value}


_Loader.add_multi_constructor("!", _construct)


_PARSED: dict[str, dict] = {}  # the text's digest -> the parsed template: every embedded stack reads it


def load_yaml(path: Path, read_only: bool = False) -> dict:
    """The parsed file: a copy the caller may change, or with ``read_only`` the parse every caller shares (a
    template's deep copy is ~3 ms, made for every embedded stack), which the caller must not change."""
    text = Path(path).read_text(encoding="utf-8")
    key = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if key not in _PARSED:
        _PARSED[key] = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader
    return _PARSED[key] if read_only else copy.deepcopy(_PARSED[key])


@dataclass
class Template:
    """A SAM template resolved against parameters, for one stack name and region."""

    path: Path
    stack_name: str = "changeflow"
    region: str = "us-east-1"
    overrides: dict[str, str] = field(default_factory=dict)
    # SAM AutoPublishAlias: the version each function's deploy published (logical id -> "N"; "1" when absent)
    versions: dict[str, str] = field(default_factory=dict)
    # ids that only the service that made a resource knows (a KMS key's id, a secret's ARN with its random
    # suffix): logical id -> {"Ref": ..., "Arn": ...}, filled in by the stack as it creates them
    physical: dict[str, dict[str, str]] = field(default_factory=dict)
    # attributes a deploy gave a resource ("Logical.Attribute" -> value), e.g. the VersionNumber of an AppConfig
    # hosted configuration version CloudFormation has replaced (changeflow.local.deploy)
    attributes: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.root = self.path.parent
        self.body = load_yaml(self.path)
        self.resources: dict[str, dict] = self.body.get("Resources", {})
        unknown = set(self.overrides) - set(self.body.get("Parameters", {}))
        if unknown:
            raise TemplateError(f"unknown template parameter(s): {', '.join(sorted(unknown))}")
        self.parameters = self._parameters()
        self.conditions = _Conditions(self)

    # --- parameters and names -------------------------------------------------------------------
    def _parameters(self) -> dict[str, Any]:
        values = {}
        for name, spec in self.body.get("Parameters", {}).items():
            raw = self.overrides.get(name, spec.get("Default"))
            if raw is None:  # CloudFormation requires it at deploy; here, where something reads it (``ref``)
                values[name] = UNSET
                continue
            raw = str(raw)
            allowed = [str(v) for v in spec.get("AllowedValues", [])]
            if allowed and raw not in allowed:
                raise TemplateError(f"parameter {name}={raw} is not one of {allowed}")
            if spec.get("Type") == "Number":
                try:
                    number = float(raw)
                except ValueError as exc:
                    raise TemplateError(f"parameter {name}={raw} is not a number") from exc
                if "MinValue" in spec and number < float(spec["MinValue"]):
                    raise TemplateError(f"parameter {name}={raw} is below {spec['MinValue']}")
            values[name] = raw
        return values

    def active(self, logical_id: str) -> bool:
        condition = self.resources[logical_id].get("Condition")
        return condition is None or self.conditions[condition]

    def of_type(self, resource_type: str) -> dict[str, dict]:
        return {
            name: res for name, res in self.resources.items() if res["Type"] == resource_type and self.active(name)
        }

    NAME_PROPERTIES = ("TableName", "FunctionName", "QueueName", "StateMachineName", "Name", "LogGroupName",
                       "BucketName")

    def physical_name(self, logical_id: str) -> str:
        """The resource's name property if the template sets one, else ``<stack>-<logical id>`` (lower case
        for a bucket, as CloudFormation names one: a bucket's name has no capitals)."""
        props = self.resources.get(logical_id, {}).get("Properties", {})
        for key in self.NAME_PROPERTIES:
            if key in props and not (key == "Name" and self.resources[logical_id]["Type"] == "AWS::Serverless::Api"):
                return str(self.resolve(props[key]))
        if self.resources.get(logical_id, {}).get("Type") == "AWS::S3::Bucket":
            return f"{self.stack_name}-{logical_id}".lower()
        return f"{self.stack_name}-{logical_id}"

    def ref(self, name: str) -> Any:
        pseudo = {
            "AWS::Region": self.region,
            "AWS::AccountId": ACCOUNT,
            "AWS::StackName": self.stack_name,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::NoValue": NO_VALUE,
        }
        if name in pseudo:
            return pseudo[name]
        if name in self.parameters:
            if self.parameters[name] is UNSET:
                raise TemplateError(f"parameter {name} has no default; pass --param {name}=VALUE")
            return self.parameters[name]
        if name.endswith((".Version", ".Alias")) and name.rsplit(".", 1)[0] in self.resources:
            return self.published(*name.rsplit(".", 1))
        if "Ref" in self.physical.get(name, {}):
            return self.physical[name]["Ref"]
        if self.generated_role(name):
            return self.physical_name(name)
        if name in self.resources:
            kind = self.resources[name]["Type"]
            if kind == "AWS::SQS::Queue":
                return self.get_att(name, "QueueUrl")
            if kind == "AWS::Serverless::Api":
                return f"{self.stack_name.lower()}api"  # the REST API id
            return self.arn(name) if kind in _REF_IS_ARN else self.physical_name(name)
        raise TemplateError(f"!Ref {name}: no such parameter or resource")

    def generated_role(self, logical_id: str) -> bool:
        """Whether ``logical_id`` is the role SAM makes for a function or state machine without a ``Role``
        (``<logical id>Role``), or for its ``ScheduleV2`` event without a ``RoleArn`` (``<logical id><event
        id>Role``), https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/sam-specification-generated-resources-function.html."""
        owner = logical_id[:-4] if logical_id.endswith("Role") else None
        if owner is None or logical_id in self.resources:
            return False
        spec = self.resources.get(owner, {})
        if spec.get("Type") in ("AWS::Serverless::Function", "AWS::Serverless::StateMachine"):
            return "Role" not in spec.get("Properties", {})
        return any(  # a ScheduleV2 event's role (<logical id><event id>Role) when it names none
            owner == f"{name}{event_id}" and event.get("Type") == "ScheduleV2" and "RoleArn" not in event.get("Properties", {})
            for name, spec in self.resources.items()
            if spec.get("Type") in ("AWS::Serverless::Function", "AWS::Serverless::StateMachine")
            for event_id, event in (spec.get("Properties", {}).get("Events") or {}).items())

    def arn(self, logical_id: str) -> str:
        if "Arn" in self.physical.get(logical_id, {}):
            return self.physical[logical_id]["Arn"]
        if self.generated_role(logical_id):
            return f"arn:aws:iam::{ACCOUNT}:role/{self.physical_name(logical_id)}"
        kind = self.resources[logical_id]["Type"]
        name = self.physical_name(logical_id)
        prefix = f"arn:aws:{{}}:{self.region}:{ACCOUNT}:"
        arns = {
            "AWS::DynamoDB::Table": prefix.format("dynamodb") + f"table/{name}",
            "AWS::Serverless::Function": prefix.format("lambda") + f"function:{name}",
            "AWS::Lambda::Function": prefix.format("lambda") + f"function:{name}",
            "AWS::Serverless::StateMachine": prefix.format("states") + f"stateMachine:{name}",
            "AWS::StepFunctions::StateMachine": prefix.format("states") + f"stateMachine:{name}",
            "AWS::Logs::LogGroup": prefix.format("logs") + f"log-group:{name}:*",
            "AWS::SQS::Queue": prefix.format("sqs") + name,
            "AWS::Events::EventBus": prefix.format("events") + f"event-bus/{name}",
            "AWS::Serverless::LayerVersion": prefix.format("lambda") + f"layer:{name}:1",
            "AWS::SNS::Topic": prefix.format("sns") + name,
            "AWS::IAM::Role": f"arn:aws:iam::{ACCOUNT}:role/{name}",
            "AWS::CloudWatch::Alarm": prefix.format("cloudwatch") + f"alarm:{name}",
            "AWS::Events::Rule": prefix.format("events") + "rule/" + "".join(
                f"{bus}/" for bus in [self.resolve(self.resources[logical_id]["Properties"].get("EventBusName", "default"))]
                if bus != "default") + name,
            "AWS::Kinesis::Stream": prefix.format("kinesis") + f"stream/{name}",
            "AWS::Pipes::Pipe": prefix.format("pipes") + f"pipe/{name}",
            "AWS::S3::Bucket": f"arn:aws:s3:::{name}",
        }
        if kind not in arns:
            raise TemplateError(f"no ARN known for {logical_id} ({kind})")
        return arns[kind]

    def published(self, logical_id: str, kind: str) -> str:
        """SAM's ``!Ref Function.Version`` (the version ARN, ``...:function:NAME:N``) and ``!Ref Function.Alias``
        (the alias ARN), for a function with ``AutoPublishAlias``.
        https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/sam-resource-function.html"""
        alias = self.function_properties(logical_id).get("AutoPublishAlias")
        if not alias:
            raise TemplateError(f"!Ref {logical_id}.{kind}: the function has no AutoPublishAlias")
        return f"{self.arn(logical_id)}:{self.versions.get(logical_id, '1') if kind == 'Version' else alias}"

    def get_att(self, logical_id: str, attribute: str) -> Any:
        if logical_id not in self.resources and not self.generated_role(logical_id):
            raise TemplateError(f"!GetAtt {logical_id}.{attribute}: no such resource")
        if f"{logical_id}.{attribute}" in self.attributes:
            return self.attributes[f"{logical_id}.{attribute}"]
        if (self.resources.get(logical_id, {}).get("Type"), attribute) == (
                "AWS::AppConfig::HostedConfigurationVersion", "VersionNumber"):
            return "1"  # the first version of a profile
        if attribute == "Arn":
            return self.arn(logical_id)
        if attribute in self.physical.get(logical_id, {}):
            return self.physical[logical_id][attribute]
        if attribute == "StreamArn" and self.resources[logical_id]["Type"] == "AWS::DynamoDB::Table":
            # a table's stream (StreamSpecification): the label is the time the stream was created, known once it is
            return f"{self.arn(logical_id)}/stream/(created with the table)"
        if attribute in ("Name", "QueueName"):
            return self.physical_name(logical_id)
        if attribute == "QueueUrl":
            return f"https://sqs.{self.region}.amazonaws.com/{ACCOUNT}/{self.physical_name(logical_id)}"
        raise TemplateError(f"!GetAtt {logical_id}.{attribute} is not supported by the embedded stack")

    # --- intrinsics -----------------------------------------------------------------------------
    def resolve(self, value: Any) -> Any:
        """``value`` with every intrinsic function evaluated (``AWS::NoValue`` entries removed)."""
        if isinstance(value, list):
            return [v for v in (self.resolve(v) for v in value) if v is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (key, arg), = value.items()
            if key == "Ref":
                return self.ref(arg)
            if key == "Condition":
                return self.conditions[arg]
            if key.startswith("Fn::"):
                return self._function(key[4:], arg)
        return {k: v for k, v in ((k, self.resolve(v)) for k, v in value.items()) if v is not NO_VALUE}

    def _function(self, name: str, arg: Any) -> Any:
        if name == "GetAtt":
            return self.get_att(*arg)
        if name == "Sub":
            return self._sub(arg)
        if name == "If":
            condition, yes, no = arg
            return self.resolve(yes if self.conditions[condition] else no)
        if name == "Equals":
            left, right = (self.resolve(a) for a in arg)
            return str(left) == str(right)
        if name == "Not":
            return not self.resolve(arg[0])
        if name == "And":
            return all(self.resolve(a) for a in arg)
        if name == "Or":
            return any(self.resolve(a) for a in arg)
        if name == "Join":
            sep, parts = arg
            return sep.join(str(p) for p in self.resolve(parts))
        if name == "Select":
            index, items = arg
            return self.resolve(items)[int(self.resolve(index))]
        if name == "Split":
            sep, text = arg
            return str(self.resolve(text)).split(sep)
        raise TemplateError(f"Fn::{name} is not supported by the embedded stack")

    def _sub(self, arg: Any) -> str:
        text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], self.resolve(arg[1]))

        def replace(match: re.Match) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in variables:
                return str(variables[name])
            if "." in name:
                return str(self.get_att(*name.split(".", 1)))
            return str(self.ref(name))

        return re.sub(r"\$\{([^}]+)\}", replace, text)

    # --- SAM ------------------------------------------------------------------------------------
    def function_properties(self, logical_id: str) -> dict[str, Any]:
        """A function's properties with ``Globals.Function`` merged in the way SAM merges them
        (maps merged with the function's own keys winning, lists appended, scalars replaced), resolved."""
        merged = _merge(copy.deepcopy(self.body.get("Globals", {}).get("Function", {})),
                        self.resources[logical_id].get("Properties", {}))
        return self.resolve(merged)

    def outputs(self) -> dict[str, Any]:
        return {
            name: self.resolve(spec["Value"])
            for name, spec in self.body.get("Outputs", {}).items()
            if spec.get("Condition") is None or self.conditions[spec["Condition"]]
        }


class _Conditions(dict):
    """The template's conditions, each evaluated when first asked (one over a parameter without a value is
    an error only if something depends on it)."""

    def __init__(self, template: "Template"):
        super().__init__()
        self.template = template
        self.expressions = template.body.get("Conditions", {})

    def __missing__(self, name: str) -> bool:
        if name not in self.expressions:
            raise KeyError(name)
        self[name] = bool(self.template.resolve(self.expressions[name]))
        return self[name]


_REF_IS_ARN = {"AWS::Serverless::StateMachine", "AWS::StepFunctions::StateMachine", "AWS::SNS::Topic",
               "AWS::Serverless::LayerVersion"}


def _merge(base: Any, override: Any) -> Any:
    if isinstance(base, dict) and isinstance(override, dict) and not _is_intrinsic(override):
        out = dict(base)
        for key, value in override.items():
            out[key] = _merge(base.get(key), value) if key in base else value
        return out
    if isinstance(base, list) and isinstance(override, list):
        return copy.deepcopy(base + override)
    return copy.deepcopy(override)


def _is_intrinsic(value: dict) -> bool:
    return len(value) == 1 and next(iter(value)).startswith(("Fn::", "Ref"))
