"""Calibration and prediction.

1. ``measure_embedded``: the embedded stack's latencies, measured now with a few sequential changes (each
   Lambda invocation timed in-process; a state transition's share is the rest of the execution's time).
2. ``measured_contention``: ``make cost``'s contention rows (this design, K = 10, 50, 200) from
   ``docs/cost.md``.
3. ``calibrate``: the simulation on the embedded platform (one process, the measured latencies, real
   back-off waits) beside those rows, with the ratio of each figure.
4. ``predict``: AWS at K = 1,000 writers on one key and at 10⁴ changes/s over 10⁶ entities, Standard and
   Express, with the cost per million changes from the cost model (``changeflow.cost``), the logs a change
   writes measured with it (``measure_logs``).
"""

from __future__ import annotations

import os
import re
import statistics
import time
from pathlib import Path
from typing import Any

from changeflow.cost.bill import cost_per_million as bill
from changeflow.cost.contention import contention
from changeflow.cost.paths import measure_paths
from changeflow.cost.prices import HANDLER_MS, PRICES

from .quotas import Quota
from .simulation import Platform, Simulation, aws, empirical, fixed, summary
from .workflow import Workflow

KS = (1, 10, 50, 200)  # shown: K = 1 gives the step latencies of the measured run's day beside today's
FIT_KS = (10, 50, 200)  # the three: what the fit is judged on
TOLERANCE = 0.25
COMPARED = (("transitions_per_applied", "transitions"), ("version_conflicts", "VersionConflict"),
            ("p50_s", "p50 s"), ("p99_s", "p99 s"))


def measure_embedded(root: Path, changes: int = 12) -> dict[str, Any]:
    """Sequential changes on the embedded stack (warm, time scale 1): each invocation's seconds and each
    execution's; a transition's share is (execution - its invocations) / its transitions."""
    from changeflow.client import Changeflow
    from changeflow.local.embedded import EmbeddedStack

    invocations: list[float] = []
    executions: list[tuple[float, float, int]] = []  # (seconds, invocation seconds, transitions)
    starts: list[float] = []  # StartExecution's own seconds
    with EmbeddedStack(root, time_scale=1) as stack:
        cf = Changeflow.for_embedded(stack)
        stack.warm()
        service = stack.lambdas
        original = service.invoke

        def timed(function, event):
            started = time.perf_counter()
            try:
                return original(function, event)
            finally:
                invocations.append(time.perf_counter() - started)

        service.invoke = timed
        try:
            for i in range(changes):
                before = len(invocations)
                started = time.perf_counter()
                _, arn = cf.start({"entityId": "calibrate#1", "operation": "put", "changeId": f"calibrate-{i}",
                                   "attributes": {"body": "x" * 800}})
                starts.append(time.perf_counter() - started)
                execution = cf.wait(arn)
                seconds = time.perf_counter() - started
                events = list(cf.history(execution.arn))
                entered = sum(1 for ev in events if ev["type"].endswith("StateEntered"))
                executions.append((seconds, sum(invocations[before:]), entered))
        finally:
            service.invoke = original
    shares = [(s - start - inv) / n for (s, inv, n), start in zip(executions, starts)]
    return {"measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "changes": changes,
            "load_average": os.getloadavg()[0],
            "invocation_s": _quantiles(invocations), "start_s": _quantiles(starts),
            "execution_s": _quantiles([s for s, _, _ in executions]),
            "transition_s": _quantiles([max(0.0, x) for x in shares]),
            "samples": {"invocation_s": invocations, "start_s": starts, "transition_s": [max(0.0, x) for x in shares]}}


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median": statistics.median(ordered), "p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
            "mean": statistics.fmean(ordered), "n": len(ordered)}


def embedded_platform(measured: dict[str, Any]) -> Platform:
    """The embedded stack as a platform: one process (the invoke lock and the interpreter's turns), the
    measured invocation, transition and start times (each drawn from its samples), no cold start
    (``stack.warm()``), no quotas. DynamoDB is in-process inside the invocation's time."""
    samples = measured["samples"]
    return Platform("embedded", transition=empirical(samples["transition_s"]), invoke=fixed(0.0),
                    handler=empirical(samples["invocation_s"]), read=fixed(0.0), write=fixed(0.0), one_process=True,
                    start=empirical(samples["start_s"]))


def measured_contention(cost_page: Path) -> dict[int, dict[str, Any]]:
    """The ``this design`` rows of docs/cost.md's contention table, by K, and the day they were measured."""
    text = cost_page.read_text(encoding="utf-8")
    section = text[text.index("### Contention"):]
    day = re.search(r"Measured (\d{4}-\d{2}-\d{2})", section)
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != len(header) or not cells[0].startswith("this design"):
            continue
        row = dict(zip(header, cells))
        rows[int(row["K"])] = {"transitions_per_applied": float(row["transitions"]),
                               "version_conflicts": float(row["VersionConflict"]),
                               "p50_s": float(row["p50 s"]), "p99_s": float(row["p99 s"]),
                               "applied": float(row["applied"]), "measured_on": day[1] if day else "?"}
    return rows


def measure_contention(root: Path, ks: tuple[int, ...]) -> dict[int, dict[str, Any]]:
    """``make cost``'s contention run (``changeflow.cost.contention``: K writers to one entity, one
    effectiveAt, real back-off timing) at each K, now: rows in ``measured_contention``'s shape."""
    day = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows = {}
    for k in ks:
        row = contention(k, 1.0, root, label="today")
        rows[k] = {"transitions_per_applied": row["transitions_per_applied"],
                   "version_conflicts": float(row["version_conflicts"]), "p50_s": row["p50_s"], "p99_s": row["p99_s"],
                   "applied": float(row["applied"]), "measured_on": f"{day}, this run"}
    return rows


def simulate_k(platform: Platform, workflow: Workflow, k: int, seeds: int = 3) -> dict[str, float]:
    """The mean over ``seeds`` runs of K writers on one key."""
    runs = []
    for seed in range(1, seeds + 1):
        sim = Simulation(platform, workflow, seed=seed)
        sim.k_writers(k)
        runs.append(summary(sim.run()))
    keys = ("applied", "version_conflicts", "transitions_per_applied", "invocations_per_applied",
            "read_units_per_applied", "write_units_per_applied", "p50_s", "p99_s", "mean_s", "cold_starts",
            "lambda_throttles", "throttled_starts")
    return {key: statistics.fmean(r[key] for r in runs) for key in keys}


def calibrate(platform: Platform, workflow: Workflow, measured: dict[int, dict[str, Any]],
              seeds: int = 3, ks: tuple[int, ...] = KS) -> list[dict[str, Any]]:
    rows = []
    for k in ks:
        if k not in measured:
            continue
        simulated = simulate_k(platform, workflow, k, seeds)
        compared = {}
        for key, _ in COMPARED:
            m, s = measured[k][key], simulated[key]
            ratio = None if m == 0 and s == 0 else (float("inf") if m == 0 else s / m)
            compared[key] = {"measured": m, "simulated": s, "ratio": ratio,
                             "within": ratio is None or abs(ratio - 1) <= TOLERANCE}
        rows.append({"k": k, "measured_on": measured[k]["measured_on"], "compared": compared, "simulated": simulated})
    return rows


def measure_logs(root: Path) -> dict[str, float]:
    """The logs a change writes at the default settings, measured with the cost model's paths at 1 KB:
    the functions' bytes per Lambda invocation (an update's, Lambda's own lines included) and the execution
    log's bytes per caught error (a stale change's: at ERROR the execution log keeps the caught failure of
    a Task, as it keeps a conflicting write's)."""
    paths = measure_paths(1000, root=root)
    update, stale = paths["update"], paths["stale"]
    return {"function_bytes_per_invocation": update["function_log_bytes"] / update["lambda_invocations"],
            "execution_bytes_per_caught_error": float(stale["execution_log_bytes"])}


def cost_per_million(figures: dict[str, float], standard: bool, workflow: Workflow, logs: dict[str, float]) -> float:
    """Dollars per million applied changes from the simulated figures per applied change, with the cost
    model's function: the logs from ``logs`` (``measure_logs``) per invocation and per conflict (each
    conflict is one caught write); Express's duration charge on the simulated mean execution time (the
    model assumes 0.1 s, which a contended key exceeds by far)."""
    conflicts = max(0.0, figures["transitions_per_applied"] - workflow.transitions_per_applied) / \
        workflow.transitions_per_conflict
    path = {"lambda_invocations": figures["invocations_per_applied"], "state_transitions":
            figures["transitions_per_applied"], "read_units": figures["read_units_per_applied"],
            "write_units": figures["write_units_per_applied"],
            "function_log_bytes": figures["invocations_per_applied"] * logs["function_bytes_per_invocation"],
            "execution_log_bytes": conflicts * logs["execution_bytes_per_caught_error"]}
    dollars = bill(path, HANDLER_MS)
    if standard:
        return dollars["standard"]
    extra = 0.0625 * max(0.0, figures["mean_s"] - 0.1) * PRICES["express_per_gb_second"] * 1e6
    return dollars["express"] + extra


def predict(table: dict[str, Quota], workflow: Workflow, logs: dict[str, float], seeds: int = 2, k: int = 1000,
            rate: float = 10_000, entities: int = 1_000_000, seconds: float = 4.0,
            warmup: float = 2.0) -> list[dict[str, Any]]:
    """AWS, Standard and Express: ``k`` writers on one key, and a Poisson stream of ``rate`` changes/s over
    ``entities`` entities for ``seconds``, counting the executions started after ``warmup`` (the cold
    starts and the full token buckets of the first seconds left out: Express's 6,000-token bucket lasts
    1.5 s at 10⁴/s; steady state after)."""
    rows = []
    for standard in (True, False):
        platform = aws(table, standard)
        hot = simulate_k(platform, workflow, k, seeds)
        rows.append({"scenario": f"K = {k:,} on one key", "platform": platform.name, **hot,
                     "admitted_per_s": None, "cost": cost_per_million(hot, standard, workflow, logs)})
        runs = []
        for seed in range(1, seeds + 1):
            sim = Simulation(platform, workflow, seed=seed)
            sim.poisson(rate, entities, seconds)
            runs.append(summary(sim.run(), since=warmup))
        stream = {key: statistics.fmean(r[key] for r in runs) for key in (
            "applied", "version_conflicts", "transitions_per_applied", "invocations_per_applied",
            "read_units_per_applied", "write_units_per_applied", "p50_s", "p99_s", "mean_s", "cold_starts",
            "lambda_throttles", "throttled_starts", "executions")}
        stream["admitted_per_s"] = (stream["executions"] - stream["throttled_starts"]) / (seconds - warmup)
        rows.append({"scenario": f"{rate:,.0f}/s over {entities:,} entities (s {warmup:g} to {seconds:g})",
                     "platform": platform.name, **stream, "cost": cost_per_million(stream, standard, workflow, logs)})
    return rows


# the embedded stack's scheduling is not measured directly: two figures are fitted to the measured rows
FIT_GRID = {"interleave": (0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0), "transition_held": (0.25, 0.5, 1.0)}


def fit(platform: Platform, workflow: Workflow, measured: dict[int, dict[str, Any]], seeds: int = 3,
        grid: dict[str, tuple[float, ...]] | None = None) -> dict[str, float]:
    """The grid point whose simulation is closest to the measured rows (sum of squared log ratios of
    transitions per applied change and p50, over K = 10, 50, 200)."""
    import math
    from dataclasses import replace

    grid = grid or FIT_GRID
    best, best_error = None, math.inf
    for interleave in grid["interleave"]:
        for held in grid["transition_held"]:
            candidate = replace(platform, interleave=interleave, transition_held=held)
            error = 0.0
            for row in calibrate(candidate, workflow, measured, seeds, FIT_KS):
                for key in ("transitions_per_applied", "p50_s"):
                    c = row["compared"][key]
                    if c["measured"] > 0 and c["simulated"] > 0:
                        error += math.log(c["simulated"] / c["measured"]) ** 2
            if error < best_error:
                best, best_error = {"interleave": interleave, "transition_held": held}, error
    return best
