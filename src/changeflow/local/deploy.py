"""What a ``sam deploy`` of a new release publishes, for the embedded stack's ``deploy``: SAM decides, at
transform time, which functions get a new version (``AutoPublishAlias``): a version's logical id is a hash of
the function's properties as written (with ``AutoPublishAliasAllProperties``; a ``!Ref`` inside them is hashed
unresolved), of its packaged code's address, and of a layer's with the layer's ``PublishLambdaVersion``.
A new logical id makes CloudFormation publish a version; the same one publishes nothing, whatever else
changed ($LATEST takes the new configuration, the published versions keep theirs). The embedded stack asks
aws-sam-translator itself, with each code directory addressed by its content as ``sam package`` uploads it.
https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/sam-resource-function.html
https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/sam-resource-layerversion.html

A parameter never reaches that hash resolved (aws/serverless-application-model#3820), so a deploy that changes
only a parameter publishes through CloudFormation instead: a resource whose ``createOnlyProperties`` (its type's
registry schema) resolve to other values is replaced, and the replacement of an ``AWS::Lambda::Version`` is a
new version. The template names each parameter a step reads in the step's ``VersionDescription``, which SAM
passes to the version's ``Description`` (createOnly); the AuthorizationPolicy, longer than a Description
allows, through the ``VersionNumber`` of an AppConfig hosted configuration version, which a new ``Content``
replaces in the same way.
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-update-behaviors.html
https://docs.aws.amazon.com/cloudformation-cli/latest/userguide/resource-type-schema.html"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Any

from .cfn import transform
from .template import Template


def digest(*directories: Path) -> str:
    """The content of ``directories`` (names and bytes, caches left out)."""
    hashed = hashlib.sha256()
    for directory in directories:
        for path in sorted(Path(directory).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                hashed.update(str(path.relative_to(directory)).encode() + b"\0" + path.read_bytes())
    return hashed.hexdigest()


def version_ids(template: Template, root: Path) -> dict[str, str]:
    """Function logical id -> the logical id SAM gives its ``AWS::Lambda::Version`` for this release."""
    uris = {}
    for kind, key in (("AWS::Serverless::Function", "CodeUri"), ("AWS::Serverless::LayerVersion", "ContentUri")):
        for logical_id, spec in template.of_type(kind).items():
            location = spec.get("Properties", {}).get(key)
            if isinstance(location, str) and not location.startswith("s3://"):
                uris[logical_id] = f"s3://packaged-artifacts/{digest(root / location)}.zip"
    resources = transform(template.path, template.overrides, uris)["Resources"]
    return {spec["Properties"]["FunctionName"]["Ref"]: name for name, spec in resources.items()
            if spec["Type"] == "AWS::Lambda::Version"}


@cache
def create_only(resource_type: str) -> tuple[str, ...]:
    """The top-level properties whose new value makes CloudFormation replace a resource of ``resource_type``
    (``createOnlyProperties`` of the type's schema, as cfn-lint bundles the CloudFormation registry's)."""
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", resource_type).schema
    return tuple(path.split("/")[2] for path in schema.get("createOnlyProperties", ()))


def _create_only_values(template: Template, logical_id: str) -> dict[str, Any]:
    spec = template.resources[logical_id]
    properties = spec.get("Properties", {})
    return {key: template.resolve(properties[key]) for key in create_only(spec["Type"]) if key in properties}


def carry_attributes(before: Template, after: Template) -> None:
    """The attributes CloudFormation gives ``after``'s resources when it updates the stack from ``before``: an
    AppConfig hosted configuration version is immutable, so a new createOnly value (its ``Content``) replaces
    it with the profile's next ``VersionNumber``.
    https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-appconfig-hostedconfigurationversion.html"""
    for logical_id in after.of_type("AWS::AppConfig::HostedConfigurationVersion"):
        if logical_id not in before.of_type("AWS::AppConfig::HostedConfigurationVersion"):
            continue  # created: version 1
        number = int(before.get_att(logical_id, "VersionNumber"))
        if _create_only_values(before, logical_id) != _create_only_values(after, logical_id):
            number += 1
        after.attributes[f"{logical_id}.VersionNumber"] = str(number)
    for key, value in before.attributes.items():  # what AWS assigned at creation and an update keeps: a table's stream
        if key.endswith(".StreamArn") and key.split(".", 1)[0] in after.resources:
            after.attributes.setdefault(key, value)


def version_description(template: Template, logical_id: str) -> Any:
    """The ``Description`` of the function's ``AWS::Lambda::Version``: SAM passes ``VersionDescription`` to it
    as written, and CloudFormation resolves it."""
    spec = template.resources[logical_id].get("Properties", {})
    return template.resolve(spec["VersionDescription"]) if "VersionDescription" in spec else None


def published(before: Template, after: Template, before_ids: dict[str, str], after_ids: dict[str, str]) -> set[str]:
    """The functions a deploy from ``before`` to ``after`` publishes a new version of: SAM names the version
    anew (``version_ids``), or CloudFormation replaces it because its Description resolves to another value.
    ``after`` has its attributes carried over first (``carry_attributes``)."""
    return {logical_id for logical_id in after_ids
            if logical_id not in before.resources or before_ids.get(logical_id) != after_ids[logical_id]
            or version_description(before, logical_id) != version_description(after, logical_id)}
