"""A template's function as the Lambda runtime runs it, the way ``sam local invoke`` reads it: its code,
handler, layers, memory, timeout and environment (``--env-vars`` overrides as SAM applies them), with the
resources' names of the local stack or of a stack deployed on AWS."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..template import Template
from .emulator import FunctionSpec


class InvokeError(Exception):
    """The function could not be run (not in the template, no event file...): exit status 1."""


def override_environment(variables: dict[str, str], overrides: dict, logical_id: str, name: str) -> dict[str, str]:
    """SAM's ``--env-vars``: ``Parameters`` applies to every function, the function's own entry (by
    logical id or name) wins; only variables the template declares are overridden, as in SAM."""
    if not isinstance(overrides, dict):
        raise InvokeError("--env-vars: expected a JSON object")
    chosen = dict(overrides.get("Parameters") or {})
    for key in (logical_id, name):
        chosen.update(overrides.get(key) or {})
    out = dict(variables)
    for key, value in chosen.items():
        if key in out:
            out[key] = "" if isinstance(value, (dict, list)) or value is None else (
                str(value).lower() if isinstance(value, bool) else str(value))
    return out


def function_spec(template, root: Path, logical_id: str, overrides: dict | None = None) -> FunctionSpec:
    functions = template.of_type("AWS::Serverless::Function")
    if logical_id not in functions:
        by_name = {template.physical_name(f): f for f in functions}
        if logical_id not in by_name:
            raise InvokeError(f"Function {logical_id} not found in template")
        logical_id = by_name[logical_id]
    props = template.function_properties(logical_id)
    name = props.get("FunctionName") or template.physical_name(logical_id)
    variables = {k: _stringify(v) for k, v in props.get("Environment", {}).get("Variables", {}).items()}
    variables = override_environment(variables, overrides or {}, logical_id, name)
    layers = template.of_type("AWS::Serverless::LayerVersion")
    layer_dirs = []
    for ref in props.get("Layers", []):
        for layer_id, spec in layers.items():
            if template.arn(layer_id) == ref or layer_id == ref:
                layer_dirs.append(Path(root) / template.resolve(spec["Properties"]["ContentUri"]))
    return FunctionSpec(logical_id, name, Path(root) / props["CodeUri"], props["Handler"], variables,
                        int(props.get("MemorySize", 128)), int(props.get("Timeout", 3)), layer_dirs)


def _stringify(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return "" if isinstance(value, (dict, list)) or value is None else str(value)


def deployed_template(root: Path, template_path: Path, stack_name: str, region: str | None, params: dict):
    """The template with every resource's physical name taken from the deployed stack (CloudFormation
    names resources itself: ``<stack>-ChangeTable-1ABC...``)."""
    import boto3

    cloudformation = boto3.client("cloudformation", region_name=region)
    physical = {}
    for page in cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack_name):
        for resource in page["StackResourceSummaries"]:
            physical[resource["LogicalResourceId"]] = resource["PhysicalResourceId"]

    class Deployed(Template):
        def physical_name(self, logical_id: str) -> str:
            return physical.get(logical_id) or super().physical_name(logical_id)

        def published(self, logical_id: str, kind: str) -> str:
            # SAM names the version <Function>Version<hash> and the alias <Function>Alias<name>; their
            # physical ids are the version's and the alias's ARNs (a version left by a deploy is retained
            # outside the stack, so the stack lists the current one only)
            found = [arn for resource, arn in physical.items()
                     if resource.startswith(f"{logical_id}{kind}") and arn.startswith("arn:")]
            return found[0] if len(found) == 1 else super().published(logical_id, kind)

    return Deployed(template_path, stack_name, cloudformation.meta.region_name, params)
