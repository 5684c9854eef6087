"""Every documented make target has a test of its own code path (issue 38.1: `make capacity` crashed on main
while every test passed, because none ran it). The measurement targets run here through make itself, with
``QUICK=1`` (the Makefile's small budgets: seconds, not the full run), in a copy of the project
(tests/make_targets.py); `make bench` and `make reliability` in tests/test_make_bench.py. A target that is a
test run itself, or whose commands other tests run, is named with where.

What is checked is that the target's recipe runs to its end and produces what it promises (the pages'
blocks rewritten, its JSON, its report), never its figures: those are the full run's."""

from __future__ import annotations

import json
import re

import pytest

from conftest import ROOT
from make_targets import documented_targets, make, makefile_targets, project_copy, recipe

# Every documented target and where its code path is tested. "here" and "bench file": run through make.
COVERED = {
    "run": "tests/test_readme_tour.py runs it verbatim (the README's first command, in a fresh checkout)",
    "cost": "here",
    "capacity": "here",
    "bench": "tests/test_make_bench.py",
    "reliability": "tests/test_make_bench.py",
    "lint": "here: its recipe is the security checks tests/test_security.py runs (security.run) and the "
            "asl-validator tests/test_template.py runs",
    "diff-asl": "make test runs it (tests/run_files.py's extra job); tests/test_diffasl.py tests its rules",
    "test": "the suite itself (CI runs it on a clean clone)",
    "test-files": "make test runs the same jobs (tests/run_files.py)",
    "test-long": "make test's runner (tests/run_files.py) with CHANGEFLOW_LONG=1: the files' own longer budgets",
    "test-quick": "its files are the unit files make test runs",
    "test-emulator": "make test runs the workflow suite in the emulator (tests/run_files.py's EMULATOR_FILES)",
    "setup": "make test depends on it",
    "build": "sam build: tests/test_template.py builds the template",
    "simulate": "tests/test_simulation.py runs it through make (one seed's operations, JSON=1)",
    "simulate-long": "tests/test_simulation.py runs it through make (HOURS small enough for one seed)",
}


def test_every_documented_target_exists_and_has_a_test_of_its_code_path():
    documented = documented_targets()
    assert documented <= makefile_targets(), "a page names a make target the Makefile does not have"
    assert documented - set(COVERED) == set(), "give each new documented target a test here (or say where)"
    assert set(COVERED) - documented == set(), "no longer documented: drop it from COVERED"


def test_every_measurement_target_takes_the_quick_budget():
    # QUICK=1 must reach each measurement command, or a test of the target runs the full budget (or nothing)
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in ("cost", "bench", "capacity", "reliability"):
        for line in recipe(target):
            if "benchmarks/" in line and "readme_tables" not in line and "--bill-of" not in line \
                    or "changeflow capacity" in line:
                variable = re.search(r"\$\((\w+_FLAGS)\)", line)
                assert variable, f"make {target}: {line!r} takes no budget flags"
                assert re.search(rf"^{variable[1]} :=", makefile, re.M), variable[1]


@pytest.fixture
def copy(tmp_path):
    return project_copy(tmp_path)


def test_make_cost_measures_writes_its_pages_and_prints_the_bill(copy):
    done = make(copy, "cost")
    report = json.loads((copy / "build" / "bench" / "cost.json").read_text())
    # the complete bill per entry point and workflow type, the floor beside it
    assert set(report["bill"]) == {"direct", "api", "events"}
    row = report["bill"]["direct"]["1000"]
    assert row["express"]["total"] > row["floor"] > 0 and row["standard"]["total"] > row["standard_floor"]
    # the page's blocks rewritten in the copy, dated today, the checkout untouched
    page = (copy / "docs" / "cost.md").read_text()
    for block in ("cost-units", "cost-bill", "cold-start", "changes-index"):
        assert re.search(rf"measured:{block} begin[^\n]*\nMeasured on \d{{4}}-\d{{2}}-\d{{2}} \(`make cost`\)", page), block
    assert (ROOT / "docs" / "cost.md").read_text() != page
    # and make cost prints the bill, then the archive and as-of figures
    assert "The complete bill of one update" in done.stdout and "x floor" in done.stdout
    assert "| versions |" in done.stdout and "execution log" in done.stdout
    # what the changes index adds (issue 35), measured through the workflow: as first built every version moved
    # its entry (GSI.html: two writes when a key changes); keyed by the hour, one in its predecessor's hour none
    index = report["changes_index"]["kinds"]
    assert index["a version in the hour of the one before it"] == {"before": 2, "after": 0}
    assert index["the first version of an entity in an hour"] == {"before": 2, "after": 2}
    assert "changes-index:\n" in done.stdout and "USD per million changes, 10 versions" in done.stdout
    # and the scheduled digests
    digests = json.loads((copy / "build" / "bench" / "digests.json").read_text())
    assert {row["run"] for row in digests["rows"]} == {"first", "changes", "from_checkpoint", "per month, hourly"}


def test_make_capacity_fits_judges_on_a_held_out_run_predicts_and_writes_its_page(copy):
    make(copy, "capacity")
    page = (copy / "docs" / "capacity.md").read_text()
    figures = json.loads((copy / "build" / "capacity.json").read_text())
    assert "Held out:" in page and "held-out run" in page  # the verdicts are on rows the fit never saw
    assert {row["role"] for row in figures["calibration"]} == {"held out", "fitted on", "another day"}
    assert any("via POST /changes" in row["platform"] for row in figures["predictions"])
    assert all(row["cost"] > 0 for row in figures["predictions"])  # the bill priced every prediction


def test_make_lint_runs_the_checks_the_security_and_template_tests_run(monkeypatch, capsys):
    from changeflow.checks import security

    lines = recipe("lint")
    assert lines == ["$(BIN)/python -m changeflow.checks.security",
                     "npx --no-install asl-validator --json-path statemachines/change.asl.json"]
    assert '"--json-path"' in (ROOT / "tests" / "test_template.py").read_text()
    assert "security.run(" in (ROOT / "tests" / "test_security.py").read_text()
    # the module's command line is a thin caller of security.run, which tests/test_security.py runs
    calls = []

    def run(template=None, build_dir=None):
        calls.append((template, build_dir))
        return security.Result(steps=[], findings=[], skipped=[], unused_skips=[])

    monkeypatch.setattr(security, "run", run)
    assert security.main([]) == 0 and calls == [(None, None)]
    assert "skipped (see SKIPPED" in capsys.readouterr().out


def test_make_diff_asl_is_a_job_of_make_test():
    import run_files

    jobs = run_files.jobs_for(["tests/test_architecture.py"], seed=1, extras=True)
    assert any(job.name == "make diff-asl" for job in jobs)
    # its virtualenv built under make test's lock (two runs at once never rebuild it under each other), then run
    assert recipe("diff-asl")[-1] == "$(ASL_VENV)/bin/python -m changeflow.checks.diffasl"
