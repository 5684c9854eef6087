"""``make cost``: the measurements of the cost model run and printed (or written as JSON for
``benchmarks/readme_tables.py``).

Per path (create, update, delete, revive, rollback, stale, duplicate, patch, write-back), the DynamoDB read
and write units computed with DynamoDB's own rounding from the item sizes of the requests actually made,
the state transitions (as Standard bills them: states entered plus retries) and Lambda invocations from the
execution history, the cost per million changes on Standard and Express workflows, cold starts against a
bare boto3 client, the deployment package sizes, and contention: K concurrent writers to one entity (K = 1,
10, 50, 200) at real back-off timing.

    .venv/bin/python benchmarks/cost.py [--json] [--no-build] [--contention 1,10,50,200] [--time-scale 1]
                                        [--compare-today] [--contention-only] [--units-only]

``--compare-today`` runs the contention table also with the back-off ceilings of main (up to 60 s) and
with main's whole design (``git archive main``, run by its own code in a child interpreter), side by side.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from changeflow.common.project import project_root

from .bill import cost_per_million
from .contention import TODAY_ENDS, contention, contention_elsewhere, main_root, print_contention, variant_root
from .paths import PATHS, measure_paths, principal_share
from .seal import print_seal_share, seal_share
from .prices import HANDLER_MS, LAMBDA_MEMORY_GB, LOG_SETTINGS, PRICES
from .startup import cold_starts, init_billed, package_sizes
from .units import FORMAT_1_BYTES


def units_report(report: dict) -> str:
    """The load-independent part of the report: units, transitions, invocations, dollars, the chain's share,
    and the fetch step's read in both table layouts."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print("DynamoDB units per change (computed from request item sizes; reads strongly consistent)")
        print(f"{'path':<10}{'outcome':<10}" + "".join(f"{f'{s // 1000} KB R/W':>14}" for s in report["sizes"])
              + f"{'transact. W (1 KB)':>20}{'transitions':>13}{'invocations':>13}")
        for path in PATHS:
            row = report["sizes"][1000][path]
            cells = "".join(f"{report['sizes'][s][path]['read_units']:>7g}/{report['sizes'][s][path]['write_units']:<6g}"
                            for s in report["sizes"])
            trans = row["transactional_write_units"]
            print(f"{path:<10}{row['outcome']:<10}{cells}{('' if trans is None else f'{trans:g}'):>20}"
                  f"{row['state_transitions']:>13}{row['lambda_invocations']:>13}")
        for title, sizes in (("", report["sizes"]),
                             (" with a retention window (prevHash stored too)", report.get("retention") or {})):
            if not sizes:
                continue
            bytes_ = max(p["chain_bytes_per_item"] for s in sizes.values() for p in s.values())
            print(f"\nThe hash chain's share{title}: format 2 stores {bytes_} bytes per item, format 1 stored "
                  f"{FORMAT_1_BYTES}; read / write units without the chain -> format 1 -> format 2")
            for path in PATHS:
                cells = "".join(
                    f"{sizes[s][path]['read_units_without_chain']:>5g}/{sizes[s][path]['write_units_without_chain']:<4g}"
                    f"-> {sizes[s][path]['read_units_chain_format_1']:g}/{sizes[s][path]['write_units_chain_format_1']:<4g}"
                    f"-> {sizes[s][path]['read_units']:g}/{sizes[s][path]['write_units']:<6g}"
                    for s in sizes)
                print(f"{path:<10}{cells}")
        if "principal" in report:
            print("\nThe principal's share (issue 21): bytes per item (v0 and history each), bytes carried between "
                  "states, and the write units of an applied change's two puts without -> with it")
            print(f"{'principal':<24}{'item B':>8}{'state B':>9}" + "".join(
                f"{f'{s // 1000} KB W':>14}" for s in (1000, 4000)))
            for label, row in report["principal"].items():
                cells = "".join(f"{row[f'write_units_{s}']['without']:>9g} -> {row[f'write_units_{s}']['with']:<2g}"
                                for s in (1000, 4000))
                print(f"{label:<24}{row['item_bytes']:>8}{row['state_bytes']:>9}{cells}")
        if "seal" in report:  # issue 33
            print_seal_share(report["seal"])
        print(f"\nCost per million changes at 1 KB (USD; Lambda {int(LAMBDA_MEMORY_GB * 1024)} MB x {HANDLER_MS:g} ms "
              "per invocation assumed; Express: 64 MB, 100 ms plus Waits; logs at the default: ERROR, no data)")
        for path in PATHS:
            c = report["sizes"][1000][path]["cost_per_million"]
            print(f"{path:<10} standard {c['standard']:>8.2f}   express {c['express']:>8.2f}   transitions "
                  f"{c['transitions_share_of_standard']:.0%} of standard")
        for size in (1000, 100_000):
            print(f"\nCloudWatch Logs ingestion per change at {size // 1000} KB: bytes (execution log + functions' "
                  "logs) and USD per million")
            for path in PATHS:
                row = report["sizes"][size][path]
                cells = "   ".join(f"{setting} {report['log_bytes'][size][setting][path]:>7,} + "
                                   f"{row['function_log_bytes']:,} B ${row['cost_per_million']['logs'][setting]:.2f}"
                                   for setting in LOG_SETTINGS)
                print(f"{path:<10}{cells}")
        print("\nThe fetch step's read and the write-back of a missing history item (issue 26.2): requests and "
              "read / write units per change")
        for layout, sizes in (("one table", report["sizes"]), ("separate history table", report["separate_history_table"])):
            for path in ("update", "write-back"):
                cells = "   ".join(f"{s // 1000} KB {sizes[s][path]['read_units']:g} / {sizes[s][path]['write_units']:g}"
                                   for s in sizes if s in (1000, 100_000))
                print(f"{layout:<24}{path:<12}{' '.join(sizes[1000][path]['requests']):<60}{cells}")
    return out.getvalue().rstrip("\n")


def main(argv: list[str] | None = None, root: Path | None = None) -> None:
    """``benchmarks/cost.py``'s command line (``make cost``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-build", action="store_true", help="skip sam build (package sizes)")
    parser.add_argument("--contention", default="1,10,50,200", help="K values of the contention table ('' skips it)")
    parser.add_argument("--time-scale", type=float, default=1.0, help="of Waits and back-offs in the contention runs")
    parser.add_argument("--compare-today", action="store_true", help="also run main's back-off ceilings (up to 60 s)")
    parser.add_argument("--contention-only", action="store_true")
    parser.add_argument("--units-only", action="store_true",
                        help="only the DynamoDB units, transitions and invocations (no timings: any load)")
    args = parser.parse_args(argv)
    root = root or project_root()
    ks = [int(k) for k in args.contention.split(",") if k.strip()]

    def contention_table() -> list[dict]:
        rows = []
        for k in ks:
            batch = [contention(k, args.time_scale, root, label="this design")]
            if args.compare_today:
                batch.append(contention(k, args.time_scale, variant_root(TODAY_ENDS, root), label="ceilings up to 60 s"))
                batch.append(contention_elsewhere(main_root(project=root), k, args.time_scale, label="main (8 transitions)"))
            rows += batch
            if not args.json:
                print_contention(batch)
        return rows

    if args.contention_only:
        rows = contention_table()
        if args.json:
            print(json.dumps(rows, indent=2))
        return
    report = {"prices": PRICES, "sizes": {}, "separate_history_table": {}, "log_bytes": {},
              "principal": principal_share(), "seal": seal_share()}
    for size in (1000, 4000, 100_000):
        report["sizes"][size] = measure_paths(size, root=root)
    for size in (1000, 100_000):  # the fetch step's two reads with SeparateHistoryTable=true
        report["separate_history_table"][size] = measure_paths(size, {"SeparateHistoryTable": "true"}, root)
    report["retention"] = {}  # a window that expires nothing in the run, but makes the writers keep prevHash
    for size in (1000, 4000):
        report["retention"][size] = measure_paths(size, {"HistoryRetentionVersions": "1000"}, root)
    for size in (1000, 100_000):  # the execution log at each setting (sizes only: the same on any machine)
        report["log_bytes"][size] = {setting: {p: r["execution_log_bytes"] for p, r in measure_paths(size, params, root).items()}
                                     for setting, params in LOG_SETTINGS.items()}
    handler_ms = HANDLER_MS

    def price_paths() -> None:
        for size, paths in ((1000, report["sizes"][1000]), (100_000, report["sizes"][100_000])):
            for name, path in paths.items():
                path["cost_per_million"] = cost_per_million(
                    path, handler_ms, {s: report["log_bytes"][size][s][name] for s in LOG_SETTINGS})

    if args.units_only:  # load-independent figures only: no timings, no build
        price_paths()
        print(json.dumps(report, indent=2, default=str) if args.json else units_report(report))
        return
    report["cold_start"] = cold_starts(root=root)
    report["init_billed"] = init_billed(report["cold_start"])
    price_paths()
    if not args.no_build:
        report["package_bytes"] = package_sizes(root)
    if args.json:
        report["contention"] = contention_table()
        print(json.dumps(report, indent=2, default=str))
        return
    print(units_report(report))
    cold = report["cold_start"]
    print(f"\nCold start (median of 7, fresh interpreter): bare boto3 + DynamoDB client "
          f"{cold['bare_boto3_dynamodb_client'] * 1000:.0f} ms")
    for name, c in cold["handlers"].items():
        print(f"{name:<26}{c['seconds'] * 1000:>6.0f} ms {c['ratio']:>6.2f}x")
    if "package_bytes" in report:
        print("\nDeployment package (sam build)")
        for name, size in report["package_bytes"].items():
            print(f"{name:<26}{size / 1024:>10.1f} KiB")
    contention_table()
