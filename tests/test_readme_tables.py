"""The documentation's measured tables come from the benchmarks' output (``changeflow.cost.pages``, run by
benchmarks/readme_tables.py): one
page (the README or a page of docs/) has a marked block for each, and what the generator renders from a
benchmark's JSON is a table with that page's columns, dated, that replaces only its own block."""

from __future__ import annotations

import json
import os
import re

import pytest

from changeflow.cost import pages as readme_tables
from changeflow.cost.bill import LINES
from conftest import ROOT

TEXTS = {page: page.read_text(encoding="utf-8") for page in readme_tables.pages(ROOT)}
WHERE = readme_tables.page_of_each_block(TEXTS)
# every measured block, wherever it lives (the generator's tests below work on one text holding them all)
README = "\n\n".join(TEXTS[page] for page in sorted(set(WHERE.values())))
BLOCKS = {"cost-units", "cost-bill", "cold-start", "changes-index", "embedded-vs-direct"}
PATHS = ["create", "update", "stale", "duplicate", "delete", "revive", "rollback", "patch", "write-back"]
# every function of template.yaml, as make cost measures each one's cold start
HANDLERS = re.findall(r"^  (\w+):\n    Type: AWS::Serverless::Function$", (ROOT / "template.yaml").read_text(), re.M)


def cost_output() -> dict:
    """What ``benchmarks/cost.py --json`` prints (sizes keyed by strings, as JSON writes them)."""
    def path(read, write, trans):
        return {"outcome": "applied", "read_units": read, "write_units": write, "requests": [], "seconds": 0.1,
                "state_transitions": 8, "lambda_invocations": 4, "transactional_write_units": trans}

    sizes = {str(size): {p: path(1, 2 * factor, None if p == "stale" else 4) for p in PATHS}
             for size, factor in ((1000, 1), (4000, 4), (100_000, 98))}
    for p in PATHS:
        sizes["1000"][p]["cost_per_million"] = {"standard": 202.26, "express": 3.36}
    lines = {line: 0.5 for line in LINES}
    row = {"standard": {**lines, "total": 104.1}, "express": {**lines, "total": 5.31}, "floor": 2.63,
           "express_over_floor": 2.02, "standard_floor": 100.0}
    bill = {entry: {str(size): row for size in (1000, 4000, 100_000)} for entry in ("direct", "api", "events")}
    return {"prices": {}, "sizes": sizes, "bill": bill,
            "cold_start": {"bare_boto3_dynamodb_client": 0.259,
                           "handlers": {h: {"seconds": 0.266, "ratio": 1.03} for h in HANDLERS}},
            "package_bytes": {**{h: 1946 for h in HANDLERS}, "CoreLayer": 5_065_908},
            "changes_index": {"kinds": {kind: {"before": 2, "after": 0} for kind in (
                "a new entity", "a version in the hour of the one before it",
                "a delete in the hour of the version before it", "the first version of an entity in an hour")},
                "per_million": {k: {"before": 1.25, "after": 1.25 / int(k)} for k in ("1", "10", "100")}}}


def bench_output() -> dict:
    """What ``benchmarks/embedded_vs_direct.py --json`` prints."""
    return {mode: {"changes": 210, "per_second": rate, "outcomes": {}, "slowdown_vs_direct": slowdown,
                   "cpu_ms_per_change": cpu, "cpu_vs_direct": cpu_slowdown}
            for mode, rate, slowdown, cpu, cpu_slowdown in (("direct", 112.7, 1.0, 9.0, 1.0),
                                                            ("embedded", 62.8, 1.80, 16.0, 1.78),
                                                            ("stock", 6.6, 16.97, 150.7, 16.82))} | {
        "embedded_by_round": [[1.53, 1.51], [1.93, 1.92], [1.75, 1.73]],
        "instructions": {"changes": 28, "direct": 43_320_801.25, "embedded": 63_383_493.68, "ratio": 1.4631}}


def test_the_pages_have_a_marked_block_for_every_measured_table_and_each_holds_one_table():
    assert set(WHERE) == BLOCKS
    blocks = readme_tables.blocks_in(README)
    assert set(blocks) == BLOCKS
    for name, body in blocks.items():
        rows = readme_tables.parse_table(body)
        assert len(rows) > 2, name


@pytest.mark.parametrize("output, names", [(cost_output, {"cost-units", "cost-bill", "cold-start", "changes-index"}),
                                           (bench_output, {"embedded-vs-direct"})])
def test_the_generator_renders_dated_tables_with_the_readmes_columns(tmp_path, output, names):
    # GIVEN a benchmark's JSON output, written on a known day
    result = tmp_path / "result.json"
    result.write_text(json.dumps(output()))
    os.utime(result, (1_795_305_600, 1_795_305_600))  # 2026-11-22 UTC
    # WHEN the generator renders it
    blocks = readme_tables.blocks_of(result)
    assert set(blocks) == names
    readme = readme_tables.blocks_in(README)
    for name, body in blocks.items():
        # THEN each block says when it was measured and holds a table with the README's columns
        assert body.startswith("Measured on 2026-11-22 (`make ")
        rows = readme_tables.parse_table(body)
        assert columns(rows[0]) == columns(readme_tables.parse_table(readme[name])[0])
        assert len(rows) == len(readme_tables.parse_table(readme[name]))


def test_units_only_output_renders_the_units_table_alone_named_by_its_command(tmp_path):
    # benchmarks/cost.py --units-only: no timings measured, so the cold-start table is left as it was
    output = cost_output()
    del output["cold_start"], output["package_bytes"]
    result = tmp_path / "result.json"
    result.write_text(json.dumps(output))
    os.utime(result, (1_795_305_600, 1_795_305_600))
    blocks = readme_tables.blocks_of(result)
    assert set(blocks) == {"cost-units", "cost-bill", "changes-index"}
    assert blocks["changes-index"].startswith("Measured on 2026-11-22 (`benchmarks/cost.py --units-only --json`)")
    assert blocks["cost-bill"].startswith("Measured on 2026-11-22 (`benchmarks/cost.py --units-only --json`)")
    assert blocks["cost-units"].startswith("Measured on 2026-11-22 (`benchmarks/cost.py --units-only --json`)")


def columns(header: list[str]) -> list[str]:
    """A header's column names without the measured baseline some carry, e.g. ``(259 ms)``."""
    import re

    return [re.sub(r" \([0-9,.]+ ms\)", "", cell) for cell in header]


def figures_of_bench_block(block: str) -> dict:
    """The output of ``benchmarks/embedded_vs_direct.py --json`` a page's block says, read back from it."""
    modes = {label: mode for mode, label in readme_tables.BENCH_LABELS.items()}
    output: dict = {modes[row[0]]: {"changes": 210, "outcomes": {}, "per_second": float(row[1]),
                                    "slowdown_vs_direct": float(row[2]), "cpu_ms_per_change": float(row[3]),
                                    "cpu_vs_direct": float(row[4])}
                    for row in readme_tables.parse_table(block)[1:]}
    rounds = re.search(r"round by round \(wall/CPU\): ([0-9./, ]+)\.", block)
    if rounds:
        output["embedded_by_round"] = [[float(x) for x in pair.split("/")] for pair in rounds[1].split(", ")]
    counted = re.search(r"over (\d+) changes: direct ([0-9.]+) M, embedded ([0-9.]+) M, \*\*([0-9.]+)×", block)
    if counted:
        output["instructions"] = {"changes": int(counted[1]), "direct": float(counted[2]) * 1e6,
                                  "embedded": float(counted[3]) * 1e6, "ratio": float(counted[4])}
    return output


def test_from_the_figures_in_the_readme_the_generator_renders_the_readmes_table(tmp_path):
    # GIVEN the block of the page, as the last `make bench` wrote it (whatever its figures: a make bench here
    # rewrites them, and make test must still pass after it)
    in_readme = readme_tables.blocks_in(README)["embedded-vs-direct"]
    assert in_readme.startswith("Measured on ")  # the README's block is dated, as the generator writes it
    # WHEN the generator renders the figures it says
    result = tmp_path / "bench.json"
    result.write_text(json.dumps(figures_of_bench_block(in_readme)))
    day, blank, rendered = readme_tables.blocks_of(result)["embedded-vs-direct"].split("\n", 2)
    # THEN it renders that block, word for word: the page holds what the generator writes, not an edit of it
    assert rendered == in_readme.split("\n", 2)[2]


def test_the_bench_block_gives_each_rounds_ratio_beside_the_medians(tmp_path):
    # GIVEN a run of three rounds whose embedded/direct ratios differ from round to round
    output = {**bench_output(), "embedded_by_round": [[1.41, 1.40], [1.62, 1.58], [1.38, 1.37]]}
    del output["instructions"]  # counted or not, a sentence of its own (the test below)
    result = tmp_path / "bench.json"
    result.write_text(json.dumps(output))
    block = readme_tables.blocks_of(result)["embedded-vs-direct"]
    # THEN the table holds the medians and the text below it says so, with every round's ratio in its order
    assert readme_tables.parse_table(block)[2][2] == f"{output['embedded']['slowdown_vs_direct']:.2f}"
    assert "The median of 3 runs of each path" in block
    assert block.endswith("(wall/CPU): 1.41/1.40, 1.62/1.58, 1.38/1.37.")
    # AND one round (make bench QUICK=1) is said as one run, not as a median
    result.write_text(json.dumps({**output, "embedded_by_round": [[1.41, 1.40]]}))
    one = readme_tables.blocks_of(result)["embedded-vs-direct"]
    assert "One run of each path" in one and "median" not in one and one.endswith("(wall/CPU): 1.41/1.40.")
    # AND an output without rounds (one run of each) renders the table alone
    result.write_text(json.dumps({k: v for k, v in output.items() if k != "embedded_by_round"}))
    assert "median" not in readme_tables.blocks_of(result)["embedded-vs-direct"]


def test_the_bench_block_gives_each_paths_instructions_when_they_were_counted(tmp_path):
    # GIVEN a run with --instructions: each path's instructions per change, counted under callgrind
    counted = {"changes": 28, "direct": 57_770_000.0, "embedded": 77_020_000.0, "ratio": 77.02 / 57.77}
    result = tmp_path / "bench.json"
    result.write_text(json.dumps({**bench_output(), "instructions": counted}))  # the figures of this test
    block = readme_tables.blocks_of(result)["embedded-vs-direct"]
    # THEN the count is said below the table, which still has one row per path and none for the count
    assert block.endswith("over 28 changes: direct 57.8 M, embedded 77.0 M, **1.33×**.")
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({k: v for k, v in bench_output().items() if k != "instructions"}))
    assert readme_tables.parse_table(block) == readme_tables.parse_table(
        readme_tables.blocks_of(plain)["embedded-vs-direct"])
    # AND without rounds the count is a paragraph of its own below the table, not glued to its last row
    alone = {k: v for k, v in bench_output().items() if k != "embedded_by_round"} | {"instructions": counted}
    result.write_text(json.dumps(alone))
    assert "|\n\nInstructions per change" in readme_tables.blocks_of(result)["embedded-vs-direct"]


def test_the_cold_start_table_gives_the_layer_size_sam_build_measured(tmp_path):
    # the sum of the layer's file sizes (what Lambda's unzipped-size quota counts), in KiB; `du --apparent-size`
    # says more because it also counts 4 KiB per directory
    result = tmp_path / "cost.json"
    result.write_text(json.dumps(cost_output()))
    rows = readme_tables.parse_table(readme_tables.blocks_of(result)["cold-start"])
    assert rows[0] == ["function", "cold start", "× bare boto3 client (259 ms)", "package (sam build)"]
    assert rows[-1] == ["CoreLayer (changeflow_core, Powertools, X-Ray SDK)", "", "", "4,947 KiB"]
    assert rows[1] == ["FetchLatestFunction", "266 ms", "1.03", "1.9 KiB"]


def test_replacing_changes_only_the_named_block_and_a_missing_marker_is_an_error(tmp_path):
    result = tmp_path / "bench.json"
    result.write_text(json.dumps({**bench_output(), "measured_on": "2026-11-23"}))
    blocks = readme_tables.blocks_of(result)
    updated = readme_tables.replace_blocks(README, blocks)
    after = readme_tables.blocks_in(updated)
    assert after["embedded-vs-direct"] == blocks["embedded-vs-direct"]
    assert after["cost-units"] == readme_tables.blocks_in(README)["cost-units"]
    assert updated.replace(after["embedded-vs-direct"], "") == README.replace(
        readme_tables.blocks_in(README)["embedded-vs-direct"], "")
    with pytest.raises(ValueError, match="no page has a block for embedded-vs-direct"):
        readme_tables.replace_blocks("# a README without markers\n", blocks)


def test_the_generator_writes_each_block_into_the_page_that_holds_it_and_nowhere_else(tmp_path, monkeypatch):
    # GIVEN two pages, each with one of the measured blocks, and a third with none
    costs, bench, other = tmp_path / "cost.md", tmp_path / "bench.md", tmp_path / "other.md"
    old = readme_tables.blocks_in(README)
    for page, name in ((costs, "cost-units"), (bench, "embedded-vs-direct")):
        begin, end = readme_tables.BEGIN.format(name=name), readme_tables.END.format(name=name)
        page.write_text(f"# {page.stem}\n\n{begin}\n{old[name]}\n{end}\n")
    other.write_text("# nothing measured here\n")
    result = tmp_path / "bench.json"
    result.write_text(json.dumps({**bench_output(), "measured_on": "2026-11-23"}))
    before = {page: page.read_text() for page in (costs, other)}
    # WHEN the bench block is regenerated over the three pages
    assert readme_tables.main([str(result), "--page", str(costs), "--page", str(bench), "--page", str(other)], root=ROOT) == 0
    # THEN only the page holding it changed, and it holds the new, dated table
    assert {page: page.read_text() for page in (costs, other)} == before
    assert readme_tables.blocks_in(bench.read_text())["embedded-vs-direct"].startswith("Measured on 2026-11-23")
    # AND a block on two pages is refused by name
    other.write_text(bench.read_text())
    with pytest.raises(ValueError, match="embedded-vs-direct is in both"):
        readme_tables.main([str(result), "--page", str(bench), "--page", str(other)], root=ROOT)


def test_a_table_with_a_missing_cell_does_not_parse():
    with pytest.raises(ValueError):
        readme_tables.parse_table("| a | b |\n|---|---|\n| 1 |")
    with pytest.raises(ValueError):
        readme_tables.parse_table("no table here")



def test_a_json_file_that_is_no_benchmarks_output_is_refused(tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"executions": []}))
    with pytest.raises(ValueError, match="neither"):
        readme_tables.blocks_of(other)
