"""Predictions for AWS: the simulation with AWS's quotas (the stack's own stage throttle among them) and
assumed latencies, at K = 1,000 writers on one key and at 10⁴ changes/s over 10⁶ entities, started directly
and through POST /changes, Standard and Express, each with its cost per million applied changes from the cost
model (``changeflow.cost``) and the logs a change writes, measured with it (``measure_logs``)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from changeflow.cost.bill import simulated_cost
from changeflow.cost.paths import measure_paths

from .calibration import simulate_k
from .quotas import Quota
from .simulation import Simulation, aws, summary
from .workflow import Workflow

KEYS = ("applied", "version_conflicts", "transitions_per_applied", "invocations_per_applied", "read_units_per_applied",
        "write_units_per_applied", "p50_s", "p99_s", "mean_s", "cold_starts", "lambda_throttles", "throttled_starts",
        "throttled_requests", "executions")


def measure_logs(root: Path) -> dict[str, float]:
    """The logs a change writes at the default settings, measured with the cost model's paths at 1 KB:
    the functions' bytes per Lambda invocation (an update's, Lambda's own lines included) and the execution
    log's bytes per caught error (a stale change's: at ERROR the execution log keeps the caught failure of
    a Task, as it keeps a conflicting write's)."""
    paths = measure_paths(1000, root=root)
    update, stale = paths["update"], paths["stale"]
    return {"function_bytes_per_invocation": update["function_log_bytes"] / update["lambda_invocations"],
            "execution_bytes_per_caught_error": float(stale["execution_log_bytes"])}


def cost_per_million(figures: dict[str, float], standard: bool, workflow: Workflow, logs: dict[str, float],
                     rate: float) -> float:
    """Dollars per million applied changes from the simulated figures per applied change, with the cost
    model's bill (``changeflow.cost.bill.simulated_cost``): the logs from ``logs`` (``measure_logs``) per
    invocation and per conflict (each conflict is one caught write), X-Ray at the scenario's ``rate``, and
    Express's duration the simulated mean execution time."""
    conflicts = max(0.0, figures["transitions_per_applied"] - workflow.transitions_per_applied) / \
        workflow.transitions_per_conflict
    log_bytes = figures["invocations_per_applied"] * logs["function_bytes_per_invocation"] + \
        conflicts * logs["execution_bytes_per_caught_error"]
    return simulated_cost(figures, standard, log_bytes, rate)


def predict(table: dict[str, Quota], workflow: Workflow, logs: dict[str, float], seeds: int = 2, k: int = 1000,
            rate: float = 10_000, entities: int = 1_000_000, seconds: float = 4.0,
            warmup: float = 2.0) -> list[dict[str, Any]]:
    """AWS, Standard and Express: ``k`` writers on one key, and a Poisson stream of ``rate`` changes/s over
    ``entities`` entities for ``seconds`` (started directly, then through POST /changes: the stage's throttle
    first), counting the executions started after ``warmup`` (the cold starts and the full token buckets of
    the first seconds left out: Express's 6,000-token bucket lasts 1.5 s at 10⁴/s; steady state after)."""
    rows = []
    for standard in (True, False):
        platform = aws(table, standard)
        hot = simulate_k(platform, workflow, k, seeds)
        rows.append({"scenario": f"K = {k:,} on one key", "platform": platform.name, **hot, "throttled_requests": 0,
                     "admitted_per_s": None, "cost": cost_per_million(hot, standard, workflow, logs, k)})
        for entry in ("direct", "api"):
            platform = aws(table, standard, entry)
            runs = []
            for seed in range(1, seeds + 1):
                sim = Simulation(platform, workflow, seed=seed)
                sim.poisson(rate, entities, seconds)
                runs.append(summary(sim.run(), since=warmup))
            stream = {key: statistics.fmean(r[key] for r in runs) for key in KEYS}
            admitted = stream["executions"] - stream["throttled_starts"] - stream["throttled_requests"]
            stream["admitted_per_s"] = admitted / (seconds - warmup)
            rows.append({"scenario": f"{rate:,.0f}/s over {entities:,} entities (s {warmup:g} to {seconds:g})",
                         "platform": platform.name, **stream, "cost": cost_per_million(stream, standard, workflow, logs,
                                                                                       rate)})
    return rows
