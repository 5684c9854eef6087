"""The SAM template as CloudFormation, offline: aws-sam-translator's own transform, with its bundled
managed-policy map (no AWS call) and the ASL inlined, for the checks that read CloudFormation (checkov,
cfn-guard, cfn-lint-serverless) and for tests of what SAM generates (API methods, rules)."""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from typing import Any


_PARSED: dict[str, dict] = {}  # the template text's digest -> aws-sam-translator's parse of it


class _BundledPolicies:
    def load(self) -> dict[str, str]:
        from samtranslator.internal.managed_policies import get_bundled_managed_policy_map

        return get_bundled_managed_policy_map("aws")


def transform(template_path: Path, parameters: dict[str, str] | None = None,
              code_uris: dict[str, str] | None = None) -> dict[str, Any]:
    """CloudFormation JSON of the SAM template at ``template_path``; ``code_uris`` (logical id -> S3 URI) are
    the packaged code's addresses where they matter (``sam package`` names an upload by its content)."""
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the translator asks boto for a region
    from samtranslator.translator.transform import transform as sam_transform
    from samtranslator.yaml_helper import yaml_parse

    template_path = Path(template_path)
    text = template_path.read_text(encoding="utf-8")
    key = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if key not in _PARSED:  # a deploy translates the same text for every release and parameter set
        _PARSED[key] = yaml_parse(text)
    body = copy.deepcopy(_PARSED[key])
    for name, resource in body.get("Resources", {}).items():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::Serverless::StateMachine" and isinstance(props.get("DefinitionUri"), str):
            props["Definition"] = json.loads((template_path.parent / props.pop("DefinitionUri")).read_text())
        for key in ("CodeUri", "ContentUri"):  # local paths become the S3 URIs sam package would write
            if isinstance(props.get(key), str) and not props[key].startswith("s3://"):
                props[key] = (code_uris or {}).get(name) or f"s3://packaged-artifacts/{name}.zip"
    return sam_transform(body, parameters or {}, _BundledPolicies())
