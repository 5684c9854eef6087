"""Dollars: a change's consumption (``units``) at the list prices (``prices``)."""

from __future__ import annotations

import math

from .prices import LAMBDA_MEMORY_GB, PRICES


def log_cost(execution_log_bytes: float, function_log_bytes: float) -> float:
    """USD of CloudWatch Logs ingestion for one change."""
    return (execution_log_bytes + function_log_bytes) / 1e9 * PRICES["logs_ingest_per_gb"]


def express_billed_seconds(wait_s: float) -> float:
    """Express bills an execution's duration, Wait states included, in 100 ms steps: a few Lambda steps of
    milliseconds (assumed 100 ms in all) plus its waits."""
    return math.ceil((0.1 + wait_s) * 10 - 1e-9) / 10


def cost_per_million(path: dict, handler_ms: float, log_bytes: dict[str, int] | None = None) -> dict:
    """USD per million changes. ``standard`` and ``express`` include CloudWatch Logs at the default log
    settings (the functions' logs and the execution log at ERROR, without data); ``logs`` gives the logs
    alone at each setting (``log_bytes``: execution log bytes by setting, measured)."""
    lambda_cost = path["lambda_invocations"] * (
        PRICES["lambda_per_request"] + LAMBDA_MEMORY_GB * max(1.0, handler_ms) / 1000 * PRICES["lambda_per_gb_second"])
    dynamodb = path["read_units"] * PRICES["dynamodb_per_rru"] + path["write_units"] * PRICES["dynamodb_per_wru"]
    log_bytes = log_bytes or {"ERROR": path["execution_log_bytes"]}
    logs = {setting: log_cost(size, path["function_log_bytes"]) * 1e6 for setting, size in log_bytes.items()}
    default_logs = logs["ERROR"] / 1e6
    express_seconds = express_billed_seconds(path.get("wait_seconds", 0.0))
    standard = path["state_transitions"] * PRICES["standard_per_transition"] + lambda_cost + dynamodb + default_logs
    express = PRICES["express_per_request"] + 0.0625 * express_seconds * PRICES["express_per_gb_second"] + \
        lambda_cost + dynamodb + default_logs
    transitions = path["state_transitions"] * PRICES["standard_per_transition"]
    return {"standard": standard * 1e6, "express": express * 1e6, "logs": logs,
            "transitions_share_of_standard": transitions / standard,
            "standard_with_all_data": (standard - default_logs) * 1e6 + logs.get("ALL + data", logs["ERROR"]),
            "express_with_all_data": (express - default_logs) * 1e6 + logs.get("ALL + data", logs["ERROR"])}
