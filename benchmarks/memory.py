"""Memory per change on the embedded stack (issue 17): what each change through the whole workflow adds
to the process, in a long ``run``/``serve``-like series, and which objects grow.

    .venv/bin/python benchmarks/memory.py                       # make bench: 2,500 changes, then 500 measured
    .venv/bin/python benchmarks/memory.py --fill 10000 --measure 1000 --entities 50

The first ``--fill`` changes (more than the 2,000 log lines and AWS calls each embedded function keeps)
bring the process to its steady state; then the next ``--measure`` changes are timed and the resident set
is read before and after (after a garbage collection), with the count of live objects of each type: what
still grows per change is the table's data (a new history item, the v0 update), each execution's record
(kept while the stack runs, as AWS keeps a closed Standard execution's history 90 days) and its execution
log in CloudWatch Logs (packed once the execution has closed). RSS is the figure a user sees; it also holds
what the allocator has not given back, so it is a ceiling on what is kept.
"""

from __future__ import annotations

import argparse
import collections
import gc
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from scaling import change, rss_mb  # noqa: E402


def live_types() -> collections.Counter:
    return collections.Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.get_objects())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fill", type=int, default=2500, help="changes before the measured window")
    parser.add_argument("--measure", type=int, default=500, help="changes measured")
    parser.add_argument("--entities", type=int, default=50, help="entities the changes are spread over")
    parser.add_argument("--without-perf-patches", action="store_true", help="leave moto's perf patches out (before/after)")
    args = parser.parse_args()
    if args.without_perf_patches:
        from changeflow.local import moto_patches

        moto_patches.install_perf = lambda: None
    from changeflow.client import Changeflow
    from changeflow.local.embedded import EmbeddedStack

    with EmbeddedStack(ROOT, time_scale=0.001) as stack:
        stack.warm()
        client = Changeflow.for_embedded(stack)
        for i in range(args.fill):
            client.submit(change(i, args.entities, "mem"))
        gc.collect()
        rss_before, types_before = rss_mb(), live_types()
        started = time.perf_counter()
        for i in range(args.fill, args.fill + args.measure):
            assert client.submit(change(i, args.entities, "mem")).status == "SUCCEEDED"
        elapsed = time.perf_counter() - started
        gc.collect()
        rss_after, grown = rss_mb(), live_types() - types_before
    n = args.measure
    print(f"{'WITHOUT the perf patches: ' if args.without_perf_patches else ''}changes {args.fill + 1:,}-{args.fill + n:,} "
          f"over {args.entities} entities: {elapsed * 1000 / n:.1f} ms/change; RSS {rss_before:.0f} -> "
          f"{rss_after:.0f} MB = {(rss_after - rss_before) * 1024 / n:.1f} KB per change")
    print("| live objects added per change | type |\n|---:|---|")
    for name, count in grown.most_common(12):
        print(f"| {count / n:.2f} | `{name}` |")


if __name__ == "__main__":
    main()
