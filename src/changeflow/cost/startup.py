"""What a cold start costs: each handler's import time in a fresh interpreter against a bare boto3
client, Lambda's INIT billing of it, and the deployment packages ``sam build`` makes."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from changeflow.common.project import project_root

from .prices import LAMBDA_MEMORY_GB, PRICES

COLD_START = r"""
import importlib, sys, time
started = time.perf_counter()
if sys.argv[1] == "boto3":
    import boto3
    boto3.client("dynamodb")
else:  # as Lambda's runtime imports the handler's module: by name, from the task root on sys.path
    sys.path.insert(0, sys.argv[1])
    importlib.import_module("app")
print(time.perf_counter() - started)
"""


def cold_starts(rounds: int = 7, root: Path | None = None) -> dict:
    """Median import-and-initialise time of each handler module (a Lambda-like environment, tracing on)
    against importing boto3 and creating a DynamoDB client, each in a fresh interpreter."""
    from changeflow.local.template import Template

    root = root or project_root()
    template = Template(root / "template.yaml")
    base_env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "PYTHONPATH": str(root / "layers" / "core"), "PYTHONDONTWRITEBYTECODE": "1"}
    base_env.pop("POWERTOOLS_TRACE_DISABLED", None)

    def timed(target: str, env: dict) -> float:
        runs = [float(subprocess.run([sys.executable, "-c", COLD_START, target], env=env, capture_output=True,
                                     text=True, check=True).stdout) for _ in range(rounds)]
        return statistics.median(runs)

    results = {}
    baseline = timed("boto3", base_env)
    for logical_id in template.of_type("AWS::Serverless::Function"):
        props = template.function_properties(logical_id)
        env = {**base_env, **{k: str(v) for k, v in props["Environment"]["Variables"].items()},
               "AWS_LAMBDA_FUNCTION_NAME": logical_id, "LAMBDA_TASK_ROOT": str(root / props["CodeUri"]),
               "_X_AMZN_TRACE_ID": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
               "AWS_XRAY_CONTEXT_MISSING": "IGNORE_ERROR"}
        seconds = timed(str(root / props["CodeUri"]), env)
        results[logical_id] = {"seconds": seconds, "ratio": seconds / baseline}
    return {"bare_boto3_dynamodb_client": baseline, "handlers": results}


def init_billed(cold: dict) -> dict:
    """Lambda bills the INIT phase of ZIP functions on managed runtimes since 2025-08-01 ("AWS Lambda
    standardizes billing for INIT Phase", https://aws.amazon.com/blogs/compute/aws-lambda-standardizes-billing-for-init-phase/):
    USD per million cold starts of each function, its measured import time at the template's memory."""
    return {name: c["seconds"] * LAMBDA_MEMORY_GB * PRICES["lambda_per_gb_second"] * 1e6
            for name, c in cold["handlers"].items()}


def package_sizes(root: Path | None = None) -> dict:
    """Sizes of what sam build produces for each function and the layer (runtime overridden to this Python)."""
    root = root or project_root()
    build = Path(tempfile.mkdtemp(prefix="changeflow-build-"))
    metadata = build / "samcli"
    metadata.mkdir()
    (metadata / "metadata.json").write_text(json.dumps({"lastVersionCheck": time.time(), "telemetryEnabled": False}))
    runtime = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    sam = root / ".venv" / "bin" / "sam"
    subprocess.run([str(sam), "build", "--parameter-overrides", f"Runtime={runtime}", "--build-dir", str(build / "out")],
                   cwd=root, check=True, capture_output=True,
                   env={**os.environ, "SAM_CLI_TELEMETRY": "0", "__SAM_CLI_APP_DIR": str(metadata),
                        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    sizes = {}
    for folder in sorted((build / "out").iterdir()):
        if folder.is_dir():
            sizes[folder.name] = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    return sizes
