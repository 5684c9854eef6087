"""The stack a command names: ``--stack-name`` (a stack deployed on AWS, found by its CloudFormation
Outputs) or ``--endpoint-url`` (a running ``changeflow serve``, which publishes its Outputs the same way).
Every command that talks to a stack, and ``changeflow console``, finds it here: the same checks and the
same client. Commands call ``targets.client_for`` through this module, so that a test can point them at an
embedded stack in one place."""

from __future__ import annotations

from ..common.errors import UsageError
from . import Changeflow


def client_for(args) -> Changeflow:
    """The client of the stack that ``args`` (``stack_name``, ``endpoint_url``, ``region``) names."""
    if args.stack_name:
        import boto3

        if not (args.region or boto3.session.Session().region_name):
            raise UsageError("--stack-name needs a region: pass --region REGION or set AWS_REGION")
        return Changeflow.for_aws_stack(args.stack_name, args.region)
    return Changeflow.for_aws_stack("changeflow", args.region or "us-east-1", endpoint_url=args.endpoint_url)
