"""Calibration: the simulation on the embedded platform against the embedded stack, measured.

1. ``measure_embedded``: the embedded stack's latencies, measured now with a few sequential changes (each
   Lambda invocation timed in-process; a state transition's share is the rest of the execution's time).
2. ``measure_contention``: the cost model's contention run (K writers to one entity, real back-off timing)
   measured now, twice: one run the two scheduling figures are fitted on (``fit``), and one held out that
   the verdicts are given on (``calibrate``, ``verdicts``): a fit is never judged on the rows it was fitted
   to. ``measured_contention``: the rows docs/cost.md recorded on another day, shown beside them.
3. ``fit``: the two figures that sequential changes cannot measure, over their whole range (0 to 1), a coarse
   grid refined around its best point; a value at an edge of its range is reported as such.

The predictions for AWS are in ``predictions``.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from pathlib import Path
from typing import Any

from changeflow.cost.contention import contention

from .simulation import Platform, Simulation, empirical, fixed, summary
from .workflow import Workflow

KS = (1, 10, 50, 200)  # shown: K = 1 gives the step latencies of the measured run's day beside today's
FIT_KS = (10, 50, 200)  # docs/cost.md's rows the fit uses when no contention is measured now (nothing held out)
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
        stack.stop_pipes()  # the workflow alone: the feed is priced apart (changeflow.cost.feed)
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


def measure_contention(root: Path, ks: tuple[int, ...], label: str = "this run") -> dict[int, dict[str, Any]]:
    """``make cost``'s contention run (``changeflow.cost.contention``: K writers to one entity, one
    effectiveAt, real back-off timing) at each K, now: rows in ``measured_contention``'s shape."""
    day = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows = {}
    for k in ks:
        row = contention(k, 1.0, root, label=label)
        rows[k] = {"transitions_per_applied": row["transitions_per_applied"],
                   "version_conflicts": float(row["version_conflicts"]), "p50_s": row["p50_s"], "p99_s": row["p99_s"],
                   "applied": float(row["applied"]), "measured_on": f"{day}, {label}"}
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
              seeds: int = 3, ks: tuple[int, ...] = KS, role: str = "held out") -> list[dict[str, Any]]:
    """The simulation beside each measured K (``role``: what the rows are to the fit: ``held out``,
    ``fitted on``, ``another day``), each figure's ratio and whether it is within ±25%."""
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
        rows.append({"k": k, "measured_on": measured[k]["measured_on"], "role": role, "compared": compared,
                     "simulated": simulated})
    return rows


# The embedded stack's scheduling is not measured directly: two figures are fitted, each over its whole range.
FIT_RANGE = {"interleave": (0.0, 1.0), "transition_held": (0.0, 1.0)}
COARSE = 6  # points per figure on the first pass (0, 0.2, ..., 1), then a 3 x 3 grid at half the spacing
FITTED_ON = ("transitions_per_applied", "p50_s")


def fit_error(platform: Platform, workflow: Workflow, measured: dict[int, dict[str, Any]], seeds: int,
              ks: tuple[int, ...]) -> float:
    """Sum of squared log ratios (simulated / measured) of transitions per applied change and p50 over ``ks``."""
    import math

    error = 0.0
    for row in calibrate(platform, workflow, measured, seeds, ks):
        for key in FITTED_ON:
            c = row["compared"][key]
            if c["measured"] > 0 and c["simulated"] > 0:
                error += math.log(c["simulated"] / c["measured"]) ** 2
    return error


def fit(platform: Platform, workflow: Workflow, measured: dict[int, dict[str, Any]], seeds: int = 3,
        ks: tuple[int, ...] | None = None, coarse: int = COARSE, refine: bool = True) -> dict[str, Any]:
    """The (interleave, transition_held) whose simulation is closest to ``measured`` (``fit_error``): a
    ``coarse`` x ``coarse`` grid over each figure's whole range, then a 3 x 3 grid at half the spacing around
    the best point. Deterministic (seeded simulations, ties to the first point in order). ``edges``: the
    figures that ended at an end of their range (the measured contention lies beyond what that figure can
    express, and the fit says so), never at an end of a grid inside the range."""
    from dataclasses import replace

    ks = tuple(k for k in (ks or tuple(measured)) if k in measured)
    points = {name: [lo + (hi - lo) * i / (coarse - 1) for i in range(coarse)] for name, (lo, hi) in FIT_RANGE.items()}
    best, best_error, evaluated = None, float("inf"), 0

    def search(interleaves, helds):
        nonlocal best, best_error, evaluated
        for interleave in interleaves:
            for held in helds:
                evaluated += 1
                error = fit_error(replace(platform, interleave=interleave, transition_held=held), workflow,
                                  measured, seeds, ks)
                if error < best_error - 1e-12:
                    best, best_error = {"interleave": interleave, "transition_held": held}, error

    search(points["interleave"], points["transition_held"])
    if refine:
        step = {name: (hi - lo) / (coarse - 1) / 2 for name, (lo, hi) in FIT_RANGE.items()}
        around = {name: sorted({min(FIT_RANGE[name][1], max(FIT_RANGE[name][0], round(best[name] + d * step[name], 6)))
                                for d in (-1, 0, 1)}) for name in FIT_RANGE}
        search(around["interleave"], around["transition_held"])
    edges = [name for name, (lo, hi) in FIT_RANGE.items() if best[name] in (lo, hi)]
    return {**best, "error": best_error, "edges": edges, "points": evaluated, "fitted_on_ks": list(ks)}


def verdicts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every held-out figure outside ±25% (``TOLERANCE``), in the rows' order: a pure function of the rows."""
    return [{"k": row["k"], "figure": label, "ratio": row["compared"][key]["ratio"],
             "measured": row["compared"][key]["measured"], "simulated": row["compared"][key]["simulated"]}
            for row in rows if row.get("role") == "held out"
            for key, label in COMPARED if not row["compared"][key]["within"]]
