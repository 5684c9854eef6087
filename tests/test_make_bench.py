"""`make bench` and `make reliability` run their own code paths (issue 38.1), through make itself with
``QUICK=1`` (the Makefile's small budgets), in a copy of the project (tests/make_targets.py). Apart from
tests/test_make_targets.py so that the two files run side by side in make test. Their figures are the full
runs'; what is checked is that every benchmark of the target runs to its end and reports."""

from __future__ import annotations

import json
import re

from conftest import ROOT
from make_targets import make, project_copy, recipe


def test_make_bench_runs_every_benchmark_and_rewrites_its_block(tmp_path):
    copy = project_copy(tmp_path)
    done = make(copy, "bench", timeout=900)
    # every benchmark of the recipe ran (each prints its table or figures)
    scripts = [re.search(r"benchmarks/(\w+)\.py", line)[1] for line in recipe("bench") if "benchmarks/" in line]
    assert scripts[:3] == ["embedded_vs_direct", "readme_tables", "api_front"] and len(scripts) == 8
    summary = json.loads((copy / "build" / "bench" / "embedded_vs_direct.json").read_text())
    assert {"direct", "embedded", "stock"} <= set(summary)
    assert len(summary["embedded_by_round"]) == 1  # QUICK=1: one run of each path (--rounds 1)
    out = done.stdout
    for printed in ("changes/s", "AWS calls per request", "Cold start (handler module import)", "| records |"):
        assert printed in out, printed
    page = (copy / "docs" / "embedded-stack.md").read_text()
    assert re.search(r"measured:embedded-vs-direct begin[^\n]*\nMeasured on \d{4}-\d{2}-\d{2} \(`make bench`\)", page)
    assert page != (ROOT / "docs" / "embedded-stack.md").read_text() or "Measured on" in page


def test_make_reliability_runs_every_campaign_with_no_violation(tmp_path):
    out = make(project_copy(tmp_path), "reliability", timeout=900).stdout
    campaigns = re.findall(r"^(\d+[b-e]?)\. ", out, re.M)
    assert campaigns[:2] == ["1", "1b"] and {"1c", "1d", "1e", "2", "2b", "3", "4", "5", "6", "7"} <= set(campaigns)
    total = re.search(r"^all\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", out, re.M)
    assert total and int(total[1]) > 0 and int(total[4]) == 0, out[-2000:]
