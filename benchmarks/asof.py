"""What an as-of read costs (issue 22 item 3, issue 37 item 1): requests and DynamoDB read units per read at
10, 1,000 and 100,000 versions, by the time indexes (``changeflow_core.timeindex``) and by the binary search
they replace (``asof.search``: tables created without them, items written before them), against
``GET /entities/{id}`` (one consistent GetItem of ``v0``), measured in the same run.

The versions are written straight into the embedded stack's table as the workflow leaves them (times
non-decreasing in version order, ~1 KB items, each history item with its index keys, ``v0`` = the newest);
each read runs the read API's own code (``changeflow_core.asof``) with every DynamoDB request counted from
botocore's events and priced with DynamoDB's rounding (``cost.units_of_call``: per 4 KB, eventually
consistent half a unit, a miss still billed; an index Query: its entries, and each item it fetches). The
targets: the first, second, a third, the middle, the one before the newest and the newest version, by
effective time and by recorded time; and both: as known when the middle version was recorded, each of those
up to the middle.

    .venv/bin/python benchmarks/asof.py [--sizes 10 1000 100000] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from changeflow.cost.units import units_of_call

T0 = 1_767_225_600_000


def write_history(client, table: str, entity: str, n: int) -> None:
    from changeflow_core import codec, items, model

    filler = "x" * 850  # with the model's fields, about 1 KB per item

    def item(version: int, sk: str) -> dict:
        return {"pk": entity, "sk": sk, "version": version, "effectiveAt": T0 + version * 10,
                "recordedAt": T0 + version * 10 + 5, "changeId": f"c{version}", "operation": "put", "actor": "bench",
                "body": filler}

    def history(version: int) -> dict:  # the history step's item: the version before it is what it decided on
        before = items.latest_state(item(version - 1, model.LATEST_SK)) if version > 1 else None
        return {**item(version, model.history_sk(version)), **items.index_keys(version, before)}

    batch = [codec.serialize_item(history(v)) for v in range(1, n + 1)] + [codec.serialize_item(item(n, model.LATEST_SK))]
    for start in range(0, len(batch), 25):
        client.batch_write_item(RequestItems={table: [{"PutRequest": {"Item": i}} for i in batch[start:start + 25]]})


def searched(client, table: str, history_table: str, entity: str, as_of, known_at):
    """The binary search alone (``asof.search``), as a table without the time indexes reads."""
    from changeflow_core import asof, items, model

    history = asof.History(client, table, history_table, entity)
    bounds = [(c, t) for c, t in ((model.RECORDED_AT, known_at), (model.EFFECTIVE_AT, as_of)) if t is not None]
    return items.view(asof.search(history, bounds).item), history


def measure(sizes: list[int]) -> dict:
    from changeflow.client import Changeflow
    from changeflow.local.embedded import EmbeddedStack
    from changeflow_core import asof, reads

    stack = EmbeddedStack().start()
    try:
        cf = Changeflow.for_embedded(stack)
        client = cf.dynamodb
        calls: list[tuple[str, dict, dict]] = []
        asked: list[dict] = []  # the API parameters of the request in flight (one at a time here)

        def before(params, **kwargs):
            asked.append(dict(params))

        def after(model, parsed, **kwargs):
            calls.append((model.name, asked.pop(), parsed))

        client.meta.events.register("before-parameter-build.dynamodb", before)
        client.meta.events.register("after-call.dynamodb", after)

        def priced(run) -> tuple[int, float]:
            calls.clear()
            run()
            units = sum(units_of_call(name, params, response, {})[0] for name, params, response in calls)
            return len(calls), units

        report = {}
        for n in sizes:
            entity = f"bench#{n}"
            write_history(client, cf.table, entity, n)
            baseline = priced(lambda: reads.latest(client, cf.table, entity))
            rows = {}
            middle = max(1, n // 2)
            for label in ("asOf", "knownAt", "both"):
                for way, read in (("", asof.version_at), ("_search", searched)):
                    requests, units = [], []
                    targets = {1, 2, max(1, n // 3), middle, max(1, n - 1), n}
                    for version in sorted(v for v in targets if label != "both" or v <= middle):
                        # both: what was believed when the middle version was recorded, about each moment before it
                        as_of = T0 + version * 10 if label != "knownAt" else None
                        known_at = {"asOf": None, "knownAt": T0 + version * 10 + 5, "both": T0 + middle * 10 + 5}[label]

                        def one():
                            found, _ = read(client, cf.table, cf.history_table, entity, as_of, known_at)
                            assert found["version"] == version, (found["version"], version)
                        r, u = priced(one)
                        requests.append(r)
                        units.append(u)
                    rows[label + way] = {"requests_max": max(requests), "requests_mean": sum(requests) / len(requests),
                                         "read_units_max": max(units), "read_units_mean": sum(units) / len(units)}
            report[str(n)] = {"bound": 2 * math.log2(n) + 2, "latest": {"requests": baseline[0], "read_units": baseline[1]},
                              **rows}
        return report
    finally:
        stack.stop()


def table(report: dict) -> str:
    lines = ["| versions | `GET /entities/{id}` | as of (max) | known at (max) | both (max) | binary search: as of, "
             "known at, both (max) | 2·log2(n)+2 |", "|---:|---|---|---|---|---|---:|"]
    for n, row in report.items():
        cell = lambda r: f"{r['requests_max']} requests, {r['read_units_max']:g} units"  # noqa: E731
        short = lambda r: f"{r['requests_max']} ({r['read_units_max']:g} units)"  # noqa: E731
        latest = row["latest"]
        lines.append(f"| {int(n):,} | {latest['requests']} request, {latest['read_units']:g} unit "
                     f"| {cell(row['asOf'])} | {cell(row['knownAt'])} | {cell(row['both'])} "
                     f"| {short(row['asOf_search'])}, {short(row['knownAt_search'])}, {short(row['both_search'])} "
                     f"| {row['bound']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 1000, 100_000])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = measure(args.sizes)
    print(json.dumps(report, indent=2) if args.json else table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
