"""What a ``sam deploy`` of a new release publishes, for the embedded stack's ``deploy``: SAM decides, at
transform time, which functions get a new version (``AutoPublishAlias``): a version's logical id is a hash of
the function's properties as written (with ``AutoPublishAliasAllProperties``; a ``!Ref`` inside them is hashed
unresolved), of its packaged code's address, and of a layer's with the layer's ``PublishLambdaVersion``.
A new logical id makes CloudFormation publish a version; the same one publishes nothing, whatever else
changed ($LATEST takes the new configuration, the published versions keep theirs). The embedded stack asks
aws-sam-translator itself, with each code directory addressed by its content as ``sam package`` uploads it.
https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/sam-resource-function.html
https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/sam-resource-layerversion.html"""

from __future__ import annotations

import hashlib
from pathlib import Path

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
