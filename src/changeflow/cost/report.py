"""``make cost``: the cost model run and printed (or written as JSON for ``benchmarks/readme_tables.py``, i.e.
``changeflow.cost.pages``).

Per path (create, update, delete, revive, rollback, stale, duplicate, patch, write-back), the DynamoDB read
and write units computed with DynamoDB's own rounding from the item sizes of the requests actually made,
the state transitions (as Standard bills them: states entered plus retries) and Lambda invocations from the
execution history, the logs each function writes as its LoggingConfig sends them; the complete bill of an
update per entry point (direct, API, EventBridge), workflow type and size, beside the floor (the same
DynamoDB requests made directly) and its ratio; cold starts against a bare boto3 client, the deployment
package sizes, and contention: K concurrent writers to one entity at real back-off timing.

    .venv/bin/python benchmarks/cost.py [--json] [--no-build] [--contention 1,10,50,200] [--time-scale 1]
                                        [--compare-today] [--contention-only] [--units-only]
                                        [--sizes 1000,4000,100000] [--quick]

``--compare-today`` runs the contention table also with the back-off ceilings of main (up to 60 s) and
with main's whole design (``git archive main``, run by its own code in a child interpreter), side by side.
``--quick``: the same code path on a small budget (1 KB only, one cold start per handler, no build, no
contention): for the test of ``make cost``, not for its figures.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path

from changeflow.common.project import project_root

from . import changes_index, feed
from .bill import LINES, bill, cost_per_million, floor, storage_per_month
from .contention import TODAY_ENDS, contention, contention_elsewhere, main_root, print_contention, variant_root
from .fieldclocks import field_clock_share
from .fieldclocks import report as field_clocks_report
from .paths import ENTRIES, PATHS, measure_paths, principal_share
from .prices import LOG_SETTINGS, PAGES, PRICES, XRAY_REFERENCE_RATE
from .seal import print_seal_share, seal_share
from .startup import cold_starts, init_billed, package_sizes
from .units import FORMAT_1_BYTES

BILLED_PATH = "update"  # the bill's change: an applied put of an entity that exists
SIZES = (1000, 4000, 100_000)


def units_report(report: dict) -> str:
    """The load-independent part of the report: units, transitions, invocations, dollars, the chain's share,
    and the fetch step's read in both table layouts."""
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
        if "field_clocks" in report:  # issue 34
            print("\n" + field_clocks_report(report["field_clocks"]))
        if "changes_index" in report:  # issue 35
            print("\n" + changes_index.report(report["changes_index"]))
        print("\nCost per million changes at 1 KB, started directly (USD; the complete bill: see the bill below)")
        for path in PATHS:
            c = report["sizes"][1000][path]["cost_per_million"]
            print(f"{path:<10} standard {c['standard']:>8.2f}   express {c['express']:>8.2f}   transitions "
                  f"{c['transitions_share_of_standard']:.0%} of standard")
        for size in report["log_bytes"]:
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
                                   for s in sizes)
                print(f"{layout:<24}{path:<12}{' '.join(sizes[1000][path]['requests']):<60}{cells}")
    return out.getvalue().rstrip("\n")



def bills(report: dict) -> dict:
    """The complete bill of ``BILLED_PATH`` per entry point and size, Standard and Express, with the floor
    (the same DynamoDB requests made directly), Express's ratio to it, Standard's floor (its transitions),
    and what the versions cost to keep."""
    out: dict = {}
    for entry in ENTRIES:
        measured = report["sizes"] if entry == "direct" else report["entries"].get(entry, {})
        for size, paths in measured.items():
            path = paths[BILLED_PATH]
            standard, express, bare = bill(path, True, entry), bill(path, False, entry), floor(path)
            out.setdefault(entry, {})[size] = {
                "standard": standard, "express": express, "floor": bare, "express_over_floor": express["total"] / bare,
                "standard_floor": path["state_transitions"] * PRICES["standard_per_transition"] * 1e6,
                "storage_per_month": storage_per_month(path), "functions": path["functions"]}
    return out


def bill_report(report: dict) -> str:
    """The bill per entry point, as printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print(f"\nThe complete bill of one {BILLED_PATH} (an applied put), USD per million changes, us-east-1 list "
              f"prices; X-Ray at {XRAY_REFERENCE_RATE:g} changes/s (default sampling); floor: the same DynamoDB "
              "reads and writes made directly")
        short = {"Step Functions": "SFN", "Lambda requests": "λ req", "Lambda duration": "λ dur",
                 "DynamoDB": "DynamoDB", "CloudWatch Logs": "logs", "API Gateway": "API", "EventBridge": "events",
                 "X-Ray": "X-Ray", "KMS": "KMS"}
        print(f"{'entry':<8}{'size':>7} {'workflow':<9}" + "".join(f"{short[line]:>9}" for line in LINES)
              + f"{'total':>9}{'floor':>8}{'x floor':>9}")
        for entry, sizes in report["bill"].items():
            for size, row in sizes.items():
                for kind in ("standard", "express"):
                    lines = row[kind]
                    ratio = (f"{row['express_over_floor']:>9.2f}" if kind == "express" else
                             f"   (floor: {row['standard_floor']:.2f} for its transitions)")
                    print(f"{entry:<8}{f'{int(size) // 1000} KB':>7} {kind.capitalize():<9}"
                          + "".join(f"{lines[line]:>9.3f}" for line in LINES)
                          + f"{lines['total']:>9.2f}{row['floor']:>8.2f}" + ratio)
        first = next(iter(next(iter(report["bill"].values())).values()))  # every entry: the same workflow
        transitions = round(first["standard_floor"] / (PRICES["standard_per_transition"] * 1e6))
        print(f"Standard's floor is its state transitions ({transitions} for an applied change: "
              f"${first['standard_floor']:.0f} per million), what any Standard workflow of these steps pays; "
              "Express's is the DynamoDB requests.")
        print("Kept versions, per million changes and per month kept (every version is kept by default): ")
        for entry, sizes in report["bill"].items():
            cells = "   ".join(f"{int(size) // 1000} KB storage {row['storage_per_month']['storage']:.2f} + PITR "
                               f"{row['storage_per_month']['pitr']:.2f}" for size, row in sizes.items())
            print(f"  {entry:<8}{cells}")
        print(index_share(report))
        print("Pages read for the prices: " + ", ".join(PAGES.values()))
    return out.getvalue().rstrip("\n")


def index_share(report: dict) -> str:
    """What the time indexes (issue 37, TimeIndexes=true) add to each applied change: the write units of an
    entry in each of the two indexes, in dollars, and the bytes they keep per version."""
    lines = [f"The time indexes (issue 37, TimeIndexes=true) in one {BILLED_PATH}: write units without -> with "
             "them (each new history item writes an entry into each of the two indexes), DynamoDB's share of "
             "the bill, the bytes of keys on the history item, and of index entries kept per version"]
    for size, paths in report["sizes"].items():
        path = paths[BILLED_PATH]
        without, with_ = path["write_units_without_indexes"], path["write_units"]
        dollars = lambda wru: (path["read_units"] * PRICES["dynamodb_per_rru"] + wru * PRICES["dynamodb_per_wru"]) * 1e6  # noqa: E731
        lines.append(f"  {int(size) // 1000} KB: {without:g} -> {with_:g} write units, ${dollars(without):.2f} -> "
                     f"${dollars(with_):.2f} per million; keys {path['index_key_bytes_per_item']} B per history item, "
                     f"index entries {path['index_bytes']} B per version")
    return "\n".join(lines)


def measure(args, root: Path) -> dict:
    """The figures ``make cost`` reports (no timings but the cold starts)."""
    sizes = tuple(int(s) for s in args.sizes.split(",") if s.strip())
    large = tuple(s for s in sizes if s in (sizes[0], sizes[-1]))  # the smallest and the largest
    report = {"prices": PRICES, "pages": PAGES, "sizes": {}, "entries": {}, "separate_history_table": {},
              "log_bytes": {}, "principal": principal_share(), "seal": seal_share(),
              "field_clocks": field_clock_share(), "retention": {}}
    for size in sizes:
        report["sizes"][size] = measure_paths(size, root=root)
    for entry in ENTRIES[1:]:  # the bill's change through POST /changes and through EventBridge
        report["entries"][entry] = {size: measure_paths(size, root=root, entry=entry, paths=(BILLED_PATH,))
                                    for size in sizes}
    for size in large:  # the fetch step's two reads with SeparateHistoryTable=true
        report["separate_history_table"][size] = measure_paths(size, {"SeparateHistoryTable": "true"}, root)
    for size in sizes[:2]:  # a window that expires nothing in the run, but makes the writers keep prevHash
        report["retention"][size] = measure_paths(size, {"HistoryRetentionVersions": "1000"}, root)
    for size in large:  # the execution log at each setting (sizes only: the same on any machine)
        report["log_bytes"][size] = {setting: {p: r["execution_log_bytes"] for p, r in
                                               measure_paths(size, params, root).items()}
                                     for setting, params in LOG_SETTINGS.items()}
    for size in large:
        for name, path in report["sizes"][size].items():
            path["cost_per_million"] = cost_per_million(
                path, {s: report["log_bytes"][size][s][name] for s in LOG_SETTINGS})
    report["bill"] = bills(report)
    report["changes_index"] = changes_index.measure(root)  # issue 35: what the index adds, before and after
    return report


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
                        help="only the units, transitions, invocations, logs and bills (no timings: any load)")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="entity sizes in bytes (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=7, help="cold starts per handler (median)")
    parser.add_argument("--bill-of", type=Path, metavar="JSON",
                        help="print the bill per entry point from an earlier --json output (nothing measured)")
    parser.add_argument("--quick", action="store_true",
                        help="a small budget for the test of make cost: 1 KB, one cold start each, no build, no contention")
    args = parser.parse_args(argv)
    if args.bill_of:
        print(bill_report(json.loads(args.bill_of.read_text(encoding="utf-8"))).lstrip("\n"))
        return
    if args.quick:
        args.sizes, args.rounds, args.no_build, args.contention = "1000", 1, True, ""
    root = root or project_root()
    ks = [int(k) for k in args.contention.split(",") if k.strip()]

    def contention_table() -> list[dict]:
        rows = []
        for k in ks:
            batch = [contention(k, args.time_scale, root, label="this design")]
            if args.compare_today:
                batch.append(contention(k, args.time_scale, variant_root(TODAY_ENDS, root), label="ceilings up to 60 s"))
                batch.append(contention_elsewhere(main_root(project=root), k, args.time_scale,
                                                  label="main (8 transitions)"))
            rows += batch
            if not args.json:
                print_contention(batch)
        return rows

    if args.contention_only:
        rows = contention_table()
        if args.json:
            print(json.dumps(rows, indent=2))
        return
    report = measure(args, root)
    if args.units_only:  # load-independent figures only: no timings, no build
        print(json.dumps(report, indent=2, default=str) if args.json else units_report(report) + bill_report(report))
        return
    report["cold_start"] = cold_starts(args.rounds, root)
    report["init_billed"] = init_billed(report["cold_start"])
    report["feed"] = feed.measure_all(root, quick=args.quick)  # issue 36: the change feed per million versions
    if not args.no_build:
        report["package_bytes"] = package_sizes(root)
    if args.json:
        report["contention"] = contention_table()
        print(json.dumps(report, indent=2, default=str))
        return
    print(units_report(report))
    print(bill_report(report))
    print("\n" + feed.report(report["feed"]))
    cold = report["cold_start"]
    print(f"\nCold start (median of {args.rounds}, fresh interpreter): bare boto3 + DynamoDB client "
          f"{cold['bare_boto3_dynamodb_client'] * 1000:.0f} ms")
    for name, c in cold["handlers"].items():
        print(f"{name:<26}{c['seconds'] * 1000:>6.0f} ms {c['ratio']:>6.2f}x")
    if "package_bytes" in report:
        print("\nDeployment package (sam build)")
        for name, size in report["package_bytes"].items():
            print(f"{name:<26}{size / 1024:>10.1f} KiB")
    contention_table()
