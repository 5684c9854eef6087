"""``make capacity``: the model's tables, the calibration and the predictions, printed and written into
``docs/capacity.md``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from . import calibration, predictions, tables
from .quotas import quotas
from .workflow import read


QUICK = {"changes": 4, "seeds": 1, "coarse": 3, "refine": False,
         "predict": {"seeds": 1, "k": 50, "rate": 500, "entities": 10_000, "seconds": 1.0, "warmup": 0.5}}


def build(root: Path, simulate: bool = True, seeds: int = 3, measured_latencies: dict[str, Any] | None = None,
          contention: tuple[int, ...] = (), progress=print, quick: bool = False) -> dict[str, Any]:
    """The blocks (and the figures behind them). ``simulate=False``: the model's blocks only (no embedded
    stack, no simulation: a second). ``contention``: K values measured twice now, one run to fit on and one
    held out to judge the fit; without them the fit is on docs/cost.md's rows and nothing is held out.
    ``quick``: the same path on a small budget (the test of ``make capacity``; its figures are not to be read)."""
    q = quotas(root / "template.yaml")
    blocks = tables.model_blocks(root, q)
    figures: dict[str, Any] = {}
    if simulate:
        seeds = QUICK["seeds"] if quick else seeds
        workflow = read(root / "statemachines" / "change.asl.json")
        day = tables.today()
        changes = QUICK["changes"] if quick else 12
        progress(f"measuring the embedded stack's latencies ({changes} sequential changes)...")
        latencies = measured_latencies or calibration.measure_embedded(root, changes)
        platform = calibration.embedded_platform(latencies)
        recorded = calibration.measured_contention(root / "docs" / "cost.md")
        search = {"coarse": QUICK["coarse"], "refine": QUICK["refine"]} if quick else {}
        if contention:
            progress(f"measuring contention now, twice (the cost model's run, K = {', '.join(map(str, contention))}): "
                     "one run to fit on, one held out...")
            fit_rows = calibration.measure_contention(root, contention, "fit run")
            held = calibration.measure_contention(root, contention, "held-out run")
            progress("fitting the embedded stack's scheduling to the fit run...")
            fitted = calibration.fit(platform, workflow, fit_rows, seeds, contention, **search)
            fitted_platform = replace(platform, interleave=fitted["interleave"],
                                      transition_held=fitted["transition_held"])
            rows = (calibration.calibrate(fitted_platform, workflow, held, seeds, contention, "held out")
                    + calibration.calibrate(fitted_platform, workflow, fit_rows, seeds, contention, "fitted on")
                    + calibration.calibrate(fitted_platform, workflow, recorded, seeds, calibration.KS, "another day"))
            fitted["fitted_on"] = "the fit run"
        else:
            progress("fitting the embedded stack's scheduling to docs/cost.md's rows (nothing held out: "
                     "give --contention)...")
            fitted = calibration.fit(platform, workflow, recorded, seeds, calibration.FIT_KS, **search)
            fitted_platform = replace(platform, interleave=fitted["interleave"],
                                      transition_held=fitted["transition_held"])
            rows = calibration.calibrate(fitted_platform, workflow, recorded, seeds, calibration.KS, "fitted on")
            fitted["fitted_on"] = "docs/cost.md's rows"
        outside = calibration.verdicts(rows)
        progress("measuring the logs a change writes (the cost model's paths at 1 KB)...")
        logs = predictions.measure_logs(root)
        progress("predicting AWS: K writers on one key, a Poisson stream over many entities, direct and through "
                 "POST /changes...")
        predicted = predictions.predict(q, workflow, logs, **(QUICK["predict"] if quick else {"seeds": 2}))
        blocks["capacity-calibration"] = tables.calibration_block(rows, latencies, fitted, day, outside)
        blocks["capacity-predictions"] = tables.predictions_block(predicted, day)
        figures = {"embedded_latencies": latencies, "fit": fitted, "calibration": rows, "outside": outside,
                   "logs": logs, "predictions": predicted}
    return {"blocks": blocks, "figures": figures}


def write(root: Path, blocks: dict[str, str], page: Path | None = None) -> Path:
    page = page or root / tables.PAGE
    page.write_text(tables.replace_blocks(page.read_text(encoding="utf-8"), blocks), encoding="utf-8")
    return page


def save_figures(root: Path, figures: dict[str, Any]) -> Path:
    out = root / "build" / "capacity.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2, default=str), encoding="utf-8")
    return out
