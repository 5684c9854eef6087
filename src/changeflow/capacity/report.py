"""``make capacity``: the model's tables, the calibration and the predictions, printed and written into
``docs/capacity.md``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from . import calibration, tables
from .quotas import quotas
from .workflow import read


def build(root: Path, simulate: bool = True, seeds: int = 3, measured_latencies: dict[str, Any] | None = None,
          contention: tuple[int, ...] = (), progress=print) -> dict[str, Any]:
    """The blocks (and the figures behind them). ``simulate=False``: the model's blocks only (no embedded
    stack, no simulation: a second)."""
    q = quotas()
    blocks = tables.model_blocks(root, q)
    figures: dict[str, Any] = {}
    if simulate:
        workflow = read(root / "statemachines" / "change.asl.json")
        day = tables.today()
        progress("measuring the embedded stack's latencies (12 sequential changes)...")
        latencies = measured_latencies or calibration.measure_embedded(root)
        measured = calibration.measured_contention(root / "docs" / "cost.md")
        platform = calibration.embedded_platform(latencies)
        progress("fitting the embedded stack's scheduling to the measured contention rows...")
        fitted = calibration.fit(platform, workflow, measured, seeds)
        rows = calibration.calibrate(replace(platform, **fitted), workflow, measured, seeds)
        if contention:
            progress(f"measuring contention now (the cost model's run, K = {', '.join(map(str, contention))})...")
            today_rows = calibration.measure_contention(root, contention)
            rows += calibration.calibrate(replace(platform, **fitted), workflow, today_rows, seeds, contention)
        progress("predicting AWS: K = 1,000 on one key, 10,000/s over 1,000,000 entities...")
        progress("measuring the logs a change writes (the cost model's paths at 1 KB)...")
        logs = calibration.measure_logs(root)
        predictions = calibration.predict(q, workflow, logs, seeds=2)
        blocks["capacity-calibration"] = tables.calibration_block(rows, latencies, fitted, day)
        blocks["capacity-predictions"] = tables.predictions_block(predictions, day)
        figures = {"embedded_latencies": latencies, "fit": fitted, "calibration": rows, "logs": logs,
                   "predictions": predictions}
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
