"""``changeflow serve``, ``changeflow local invoke`` and ``changeflow console``: what runs on 127.0.0.1 (the
embedded stack behind an AWS-compatible endpoint; the audit console of a stack), and one function in the
Lambda runtime without Docker, as ``sam local invoke`` runs it."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..client import targets
from ..common.errors import OK
from ..common.params import parse_params
from ..common.project import project_root
from ..common.serving import on_sigterm, wait_until_interrupted
from ..local.runtime.emulator import (EmulatorProcess, RuntimeSetupError, interpret, runtime_environment,
                                      runtime_python)
from ..local.runtime.functions import InvokeError, deployed_template, function_spec
from ..local.template import Template
from .options import (ENDPOINT, EXIT_2, FACTOR, PORT, add_lambda_runtime_option, add_param_option, add_remote_options,
                      check_port_free, default_endpoint, exit_help)


# --- changeflow serve ---------------------------------------------------------------------------------
def cmd_serve(args) -> int:
    from ..local.server import EmbeddedServer

    parameters = parse_params(args.param)
    check_port_free(args.port)
    stopped = on_sigterm()
    if args.insecure:
        print("changeflow serve: WARNING --insecure: the REST API accepts unsigned requests and records every change "
              "as unauthenticated; API Gateway with AWS_IAM would answer them 403", file=sys.stderr)
    with EmbeddedServer(args.port, parameters, args.time_scale, lambda_runtime=args.lambda_runtime,
                        insecure=args.insecure) as server:
        outputs = server.stack.outputs
        print(f"changeflow serve: {server.url}  (stack {server.stack.template.stack_name}, time scale "
              f"{args.time_scale}, Lambda runtime {server.stack.lambda_runtime})")
        for name, value in outputs.items():
            if ".execute-api." not in str(value):  # an API's AWS URL: its local URL is printed below
                print(f"  {name}: {value}")
        for api in server.routes:
            auth = "UNSIGNED requests accepted (--insecure)" if not api.iam else \
                "SigV4 required, as AWS_IAM; default credentials testing/testing"
            print(f"  REST API {api.logical_id}: {server.url}/{api.stage}  (POST /changes, GET /entities/...; {auth})")
        print(f"  console: {server.url}/console")
        print(f"  try: changeflow submit events/workflow/put.json --endpoint-url {server.url}")
        print(f"       aws --endpoint-url {server.url} stepfunctions list-executions "
              f"--state-machine-arn {outputs['ChangeStateMachineArn']}")
        sys.stdout.flush()
        wait_until_interrupted(stopped)
    print("changeflow serve: stopped")
    return OK


def add_serve(command) -> None:
    serve = command("serve", "serve the embedded stack on 127.0.0.1 (AWS-compatible endpoint)",
                    "Serve the embedded stack on 127.0.0.1 until Ctrl-C: every AWS API the stack uses (boto3 or "
                    "the AWS CLI with --endpoint-url) and the stack's REST API under /<stage>/.",
                    exit_help("0  stopped with Ctrl-C or SIGTERM", "2  bad command line or --param",
                              "3  the port is taken"))
    serve.add_argument("--port", type=PORT, default=4566,
                       help="TCP port on 127.0.0.1 (default %(default)s; 0 picks a free one and prints it)")
    add_param_option(serve)
    serve.add_argument("--time-scale", type=FACTOR, default=1.0, metavar="FACTOR",
                       help="multiply Wait and retry back-off times (default %(default)s: real time)")
    add_lambda_runtime_option(serve)
    serve.add_argument("--insecure", action="store_true",
                       help="let the REST API accept unsigned requests (for curl), recorded as unauthenticated; "
                            "by default it verifies SigV4 as API Gateway's AWS_IAM does")
    serve.set_defaults(func=cmd_serve)


# --- changeflow local invoke ------------------------------------------------------------------------
INVOKE_EXIT_HELP = """exit status (as sam local invoke):
  0  the function ran, even if it failed or timed out (its error document is the response)
  1  it could not be run (not in the template, no event file, no Lambda runtime venv: make lambda-runtime)
  2  bad command line"""


def add_local(command) -> None:
    local = command("local", "run one function in the Lambda runtime (no Docker), like sam local",
                    "Run one function of the template as Lambda runs it, without Docker: the Runtime Interface "
                    "Emulator shipped in aws-sam-cli and awslambdaric on python3.13. `changeflow local invoke "
                    "--help` says more.",
                    exit_help("0  the function ran (see `changeflow local invoke --help`: as sam local invoke)",
                              "1  it could not be run", "2  bad command line"))
    local_commands = local.add_subparsers(dest="local_command", required=True)
    invoke = local_commands.add_parser(
        "invoke", help="invoke a function of the template once, in the Runtime Interface Emulator",
        description="Like `sam local invoke`, without Docker: the response on stdout, the function's logs "
                    "and the START/END/REPORT lines on stderr. Exit 0 when the function ran (even if it "
                    "failed: its error document is the response), 1 when it could not be run.",
        epilog=INVOKE_EXIT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    invoke.add_argument("function", help="the function's logical id in template.yaml (or its name)")
    invoke.add_argument("-e", "--event", help="JSON event file ('-' for stdin; default {})")
    invoke.add_argument("-n", "--env-vars", help="JSON file of environment overrides, as sam local invoke reads it: "
                        '{"LogicalId": {"VAR": "value"}, "Parameters": {"VAR": "value"}}')
    invoke.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="override a template parameter")
    invoke.add_argument("-t", "--template", help="the SAM template (default: template.yaml of the project)")
    where = invoke.add_mutually_exclusive_group()
    where.add_argument("--endpoint-url", default=default_endpoint(), type=ENDPOINT,
                       help="the AWS endpoint the function's clients use: a running changeflow serve "
                            "(default %(default)s)")
    where.add_argument("--stack-name", help="a stack deployed on AWS: its resources' names, real AWS endpoints")
    invoke.add_argument("--region", default=None,
                        help="AWS region of --stack-name (default: AWS_REGION or the AWS config)")
    invoke.set_defaults(func=cmd_local_invoke)


def _read_event(path: str | None) -> bytes:
    if path is None:
        return b"{}"
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvokeError(f"{path}: {exc.strerror}") from exc


def cmd_local_invoke(args) -> int:
    root = Path(args.template).resolve().parent if args.template else project_root()
    template_path = Path(args.template).resolve() if args.template else root / "template.yaml"
    try:
        params = parse_params(args.param)
        overrides = {}
        if args.env_vars:
            try:
                overrides = json.loads(Path(args.env_vars).read_text(encoding="utf-8"))
            except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested past the parser
                raise InvokeError(f"--env-vars {args.env_vars}: {exc}") from exc
        if args.stack_name:
            import boto3

            template = deployed_template(root, template_path, args.stack_name, args.region, params)
            region = template.region
            frozen = boto3.Session(region_name=region).get_credentials()
            if frozen is None:
                raise InvokeError("--stack-name: no AWS credentials found")
            frozen = frozen.get_frozen_credentials()
            credentials = {"AWS_ACCESS_KEY_ID": frozen.access_key, "AWS_SECRET_ACCESS_KEY": frozen.secret_key}
            if frozen.token:
                credentials["AWS_SESSION_TOKEN"] = frozen.token
        else:
            region = args.region or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
            template = Template(template_path, "changeflow", region, params)
            credentials = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                           "AWS_SESSION_TOKEN": "testing", "AWS_ENDPOINT_URL": args.endpoint_url}
        spec = function_spec(template, root, args.function, overrides)
        # no X-Ray daemon runs beside the emulator (sam local invoke has none either)
        spec.environment.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
        event = _read_event(args.event)
        python = runtime_python(root)
        env = runtime_environment(spec, python, region, credentials)
        process = EmulatorProcess(spec, env, python, log=lambda line: print(line, file=sys.stderr, flush=True))
        process.start()
    except (InvokeError, RuntimeSetupError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    try:
        status, body = process.invoke(event)
    finally:
        process.stop()
    payload, _failed = interpret(status, body)
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()
    return 0


# --- changeflow console -----------------------------------------------------------------------------
def cmd_console(args) -> int:
    from ..console import ConsoleServer, for_client

    check_port_free(args.port)
    client = targets.client_for(args)  # the same checks (a region for --stack-name) and client as every command
    if args.stack_name:
        label = f"stack {args.stack_name} ({client.sfn.meta.region_name})"
    else:
        label = f"changeflow serve at {args.endpoint_url}"
    with ConsoleServer(for_client(client, label), port=args.port) as server:
        print(f"changeflow console: {server.url}  ({label}; read-only but for an explicit repair; Ctrl-C stops)")
        sys.stdout.flush()
        wait_until_interrupted()
    print("changeflow console: stopped")
    return 0


def add_console(command) -> None:
    from ..console import DEFAULT_PORT

    sub = command("console", "the audit console on 127.0.0.1 for changeflow serve or a deployed stack",
                  "Serve the audit console on 127.0.0.1 until Ctrl-C: executions with the state machine drawn "
                  "and the path each took, entities with their versions and diffs, verify and repair. It reads "
                  "a running `changeflow serve` (which also answers /console itself) or, with --stack-name, a "
                  "stack deployed on AWS with your own credentials; its one write is an explicit repair.",
                  exit_help("0  stopped with Ctrl-C or SIGTERM", EXIT_2, "3  the port is taken, or the endpoint or "
                            "stack cannot be reached"))
    add_remote_options(sub, json=False, stack_help="a stack deployed on AWS (sam deploy), read with your AWS "
                                                   "credentials; needs a region")
    sub.add_argument("--port", type=PORT, default=DEFAULT_PORT,
                     help="TCP port of the console on 127.0.0.1 (default %(default)s)")
    sub.set_defaults(func=cmd_console)
