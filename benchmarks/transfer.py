"""``changeflow import`` at scale (issue 24 item 6): time against the number of records, and memory.

    .venv/bin/python benchmarks/transfer.py                          # make bench: 1,000 and 10,000 records
    .venv/bin/python benchmarks/transfer.py --sizes 1000,10000,100000  # the issue's size (long: ~1 h here)

Two series, in one run:

- **through the workflow**: a JSON Lines file of N records (one entity each, ~250 bytes) imported into one
  embedded stack by the importer the command runs (``Importer`` with the Step Functions entry point, the
  checkpoint and rejects files, the progress callback), no rate limit (the embedded stack has no quotas).
  Per size: seconds, records a second, and the time per record as a ratio to the smallest size (linear in
  the count = a ratio near 1). The process's resident set grows here with moto's own state (every item and
  every execution's history are kept in memory by the embedded stack), so it is reported, not judged.
- **one entity, in order**: N records of a single entity under one effective time, which the importer applies
  one after another in the file's order, then the same file again without its checkpoint (every record found
  done: past v0's 16 ids, in the entity's history); each per record, as a ratio to N records of N entities
  imported in the same run at the same concurrency.
- **the importer alone**: the same reading, validation, change ids, bounded queue of futures, checkpoint and
  rejects writes, against an entry point that answers at once (no stack), at 1,000, 10,000 and 100,000, each
  size in a fresh process: its peak resident set shows whether the importer's memory grows with the count.

On a shared machine absolute times move with the load; ratios within one run much less.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))  # run as a file, in a fresh process too
T0 = 1_700_000_000_000


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


def high_water_mb() -> float:
    """This process's peak resident set (VmHWM: unlike ru_maxrss, not inherited from the parent across exec)."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def write_source(path: Path, n: int, prefix: str) -> Path:
    with path.open("w", encoding="utf-8") as out:
        for i in range(n):
            out.write(json.dumps({"id": f"{prefix}#{i}", "at": T0 + i, "n": i, "body": "x" * 200}) + "\n")
    return path


def run_import(start, wait, source: Path, workdir: Path, concurrency: int, rate: float):
    from changeflow.transfer import sources
    from changeflow.transfer.importer import Checkpoint, Importer, Plan, Rejects

    plan = Plan("id", "at")
    checkpoint = Checkpoint(workdir / f"{source.name}.checkpoint", {"source": str(source), **plan.settings()})
    importer = Importer(start, wait, plan, checkpoint, Rejects(workdir / f"{source.name}.rejects.jsonl"),
                        rate=rate, concurrency=concurrency)
    began = time.perf_counter()
    summary = importer.run(sources.read(str(source)))
    return summary, time.perf_counter() - began


def through_the_workflow(sizes: list[int], workdir: Path, concurrency: int) -> list[dict]:
    from changeflow.client import Changeflow
    from changeflow.local.embedded import EmbeddedStack
    from changeflow.transfer.importer import entry_point

    rows = []
    with EmbeddedStack(ROOT, time_scale=0.0005) as stack:
        quiet(stack)
        client = Changeflow.for_embedded(stack)
        start, wait = entry_point(client, "stepfunctions", 300)
        for n in sizes:
            source = write_source(workdir / f"wf-{n}.jsonl", n, f"wf{n}")
            before = rss_mb()
            summary, seconds = run_import(start, wait, source, workdir, concurrency, rate=100_000)
            assert summary.counts["applied"] == n, summary.to_json()
            rows.append({"records": n, "seconds": round(seconds, 2), "recordsPerSecond": round(n / seconds, 1),
                         "msPerRecord": round(1000 * seconds / n, 2), "rssBeforeMb": round(before),
                         "rssAfterMb": round(rss_mb())})
            print(f"through the workflow: {n:,} records in {seconds:,.1f} s", file=sys.stderr)
    base = rows[0]["msPerRecord"]
    for row in rows:
        row["perRecordRatio"] = round(row["msPerRecord"] / base, 2)
    return rows


def quiet(stack) -> None:
    """The import and the workflow alone: the feed's pipe and the digest's schedule stopped (each priced apart,
    changeflow.cost). At the stack's time scale of 0.0005 the hourly digest fires every 1.8 s, over every entity
    written so far: beside 10,000 records it made the import's time grow with the square of the count."""
    stack.stop_pipes()
    stack.stop_schedules()


def one_entity(n: int, workdir: Path, concurrency: int) -> dict:
    """N records of one entity under one time, in order; then again without the checkpoint; against N entities."""
    from changeflow.client import Changeflow
    from changeflow.local.embedded import EmbeddedStack
    from changeflow.transfer.importer import entry_point

    def source(name: str, ids) -> Path:
        path = workdir / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"id": i, "at": T0, "n": k, "body": "x" * 200}) + "\n"
                                for k, i in enumerate(ids)))
        return path

    with EmbeddedStack(ROOT, time_scale=0.0005) as stack:
        quiet(stack)
        start, wait = entry_point(Changeflow.for_embedded(stack), "stepfunctions", 300)
        spread, spread_s = run_import(start, wait, source("spread", (f"sp#{k}" for k in range(n))), workdir,
                                      concurrency, rate=100_000)
        one = source("one", ["one#1"] * n)
        ordered, ordered_s = run_import(start, wait, one, workdir, concurrency, rate=100_000)
        (workdir / "one.jsonl.checkpoint").unlink()
        again, again_s = run_import(start, wait, one, workdir, concurrency, rate=100_000)
    assert spread.counts["applied"] == ordered.counts["applied"] == again.counts["duplicate"] == n
    per = {name: 1000 * seconds / n for name, seconds in (("spread", spread_s), ("ordered", ordered_s),
                                                            ("again", again_s))}
    print(f"one entity: {n:,} records in {ordered_s:,.1f} s in order, {again_s:,.1f} s again", file=sys.stderr)
    return {"records": n, "msPerRecordEntities": round(per["spread"], 1), "msPerRecordOneEntity":
            round(per["ordered"], 1), "msPerRecordRerun": round(per["again"], 1),
            "oneEntityRatio": round(per["ordered"] / per["spread"], 2), "rerunRatio": round(per["again"] / per["spread"], 2)}


def importer_alone_once(n: int, workdir: Path, concurrency: int) -> dict:
    """One size, in this (fresh) process: its peak resident set is the importer's, at that size."""
    from changeflow.client import Execution

    def start(request):  # the entry point answers at once, as if the change were applied
        return Execution("x", "arn", "SUCCEEDED", None, output={"outcome": "applied", "version": 1})

    source = write_source(workdir / f"alone-{n}.jsonl", n, f"al{n}")
    baseline = high_water_mb()
    summary, seconds = run_import(start, None, source, workdir, concurrency, rate=10_000_000)
    assert summary.counts["applied"] == n
    peak = high_water_mb()
    return {"records": n, "seconds": round(seconds, 2), "usPerRecord": round(1e6 * seconds / n),
            "peakMb": round(peak), "growthMb": round(peak - baseline, 1)}


def importer_alone(sizes: list[int], workdir: Path, concurrency: int) -> list[dict]:
    """Each size in its own process (a peak resident set only grows), started the same way."""
    import subprocess

    rows = []
    for n in sizes:
        done = subprocess.run([sys.executable, __file__, "--alone-once", str(n), "--concurrency", str(concurrency),
                               "--workdir", str(workdir)], capture_output=True, text=True, check=True)
        rows.append(json.loads(done.stdout))
        print(f"importer alone: {n:,} records in {rows[-1]['seconds']:,} s, peak {rows[-1]['peakMb']} MB",
              file=sys.stderr)
    return rows


def markdown(report: dict) -> str:
    lines = ["| records | through the workflow: s | records/s | ms per record | per record, ratio to the first "
             "| RSS before → after (MB) |", "|---:|---:|---:|---:|---:|---:|"]
    for r in report["workflow"]:
        lines.append(f"| {r['records']:,} | {r['seconds']:,} | {r['recordsPerSecond']:,} | {r['msPerRecord']} | "
                     f"{r['perRecordRatio']} | {r['rssBeforeMb']} → {r['rssAfterMb']} |")
    if report.get("oneEntity"):
        r = report["oneEntity"]
        lines += ["", "| records | N entities: ms per record | one entity, in order | ratio | again without the "
                  "checkpoint | ratio |", "|---:|---:|---:|---:|---:|---:|",
                  f"| {r['records']:,} | {r['msPerRecordEntities']} | {r['msPerRecordOneEntity']} | "
                  f"{r['oneEntityRatio']} | {r['msPerRecordRerun']} | {r['rerunRatio']} |"]
    lines += ["", "| records | the importer alone: s | µs per record | peak RSS (MB) | of which during the import |",
              "|---:|---:|---:|---:|---:|"]
    for r in report["alone"]:
        lines.append(f"| {r['records']:,} | {r['seconds']:,} | {r['usPerRecord']} | {r['peakMb']} | {r['growthMb']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000",
                        help="record counts through the workflow (default %(default)s)")
    parser.add_argument("--alone-sizes", default="1000,10000,100000",
                        help="record counts for the importer alone (default %(default)s)")
    parser.add_argument("--one-entity", type=int, default=200,
                        help="records of one entity, in order (default %(default)s; 0 skips it)")
    parser.add_argument("--concurrency", type=int, default=8, help="changes in flight (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    parser.add_argument("--alone-once", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.alone_once:
        print(json.dumps(importer_alone_once(args.alone_once, Path(args.workdir), args.concurrency)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        report = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "concurrency": args.concurrency,
                  "workflow": through_the_workflow([int(s) for s in args.sizes.split(",")], workdir,
                                                   args.concurrency),
                  "oneEntity": one_entity(args.one_entity, workdir, args.concurrency) if args.one_entity else None,
                  "alone": importer_alone([int(s) for s in args.alone_sizes.split(",")], workdir, args.concurrency)}
    print(json.dumps(report, indent=1) if args.json else markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
