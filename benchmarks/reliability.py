"""The reliability report: every guarantee's campaign on the real workflow (embedded stack), with cases
tried, faults injected, executions run and violations found (must be 0).

    .venv/bin/python benchmarks/reliability.py [--examples 100] [--seeds 6]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=100, help="model-based sequences (hypothesis)")
    parser.add_argument("--seeds", type=int, default=6, help="seeds for the duplicate and out-of-order campaigns")
    parser.add_argument("--quick", action="store_true",
                        help="every campaign on a small budget (one K, each fault kind once at one step, one window "
                             "case, one configuration, one seed, one concurrency, 2 examples): the test of make "
                             "reliability, not its report")
    args = parser.parse_args()
    if args.quick:
        args.examples, args.seeds = 2, 1
    ks = (3,) if args.quick else (10, 25, 50)

    from hypothesis import HealthCheck, given, settings

    from changeflow.checks import outages, reference_model
    from changeflow.checks import reliability as r
    from changeflow.client import Changeflow
    from changeflow.local.embedded import EmbeddedStack

    started = time.perf_counter()
    tallies = []
    with EmbeddedStack(ROOT, time_scale=0.1) as stack:  # as tests/test_guarantees.py: back-offs longer than a step
        cf = Changeflow.for_embedded(stack)
        hot = r.Tally(f"1. hot key (K={', '.join(map(str, ks))})")
        for k in ks:
            hot.add(r.hot_key(cf, k, shared_time=True, seed=k))
            hot.add(r.hot_key(cf, k, shared_time=False, seed=k))
        patches = r.Tally(f"1b. hot key, patches of different fields (K={', '.join(map(str, ks))})")
        for k in ks:  # every field must land: no lost update
            patches.add(r.hot_key(cf, k, shared_time=True, seed=k, patches=True))
        tallies += [hot, patches]
    from changeflow.checks import merging

    # issue 34: server-given times, every entry point, faults (quick: K = 3 on Standard, short back-offs)
    tallies += merging.rows(ks=(3,), workflows=("Standard",), time_scale=0.05) if args.quick else merging.rows()
    with EmbeddedStack(ROOT, time_scale=0.001, parameters={"HistoryRetentionVersions": "3",
                                                           "HistoryRetentionDays": "30"}) as stack:
        cf = Changeflow.for_embedded(stack)
        if args.quick:  # each kind of fault once, at one step (tests/test_guarantees.py runs every step)
            faults = r.Tally("2. faults at every step boundary")
            for kind in r.KINDS:
                r.fault_case(stack, cf, r.STEPS[1], kind, 1, faults)
        else:
            faults = r.faults(stack, cf, times=(1, 2, 3))
        faults.add(r.history_outage(stack, cf))
        faults.add(outages.tag_outage(stack, cf))
        tallies.append(faults)
    configurations = ({"HistoryRetentionVersions": "3", "HistoryRetentionDays": "30"}, {"SeparateHistoryTable": "true"},
                      {"WorkflowType": "EXPRESS", "StateMachineLogLevel": "ALL", "StateMachineIncludeExecutionData": "true"},
                      {"HistoryRetentionVersions": "1"})[:1 if args.quick else None]
    windows = r.Tally(f"2b. every fault with another writer in its window ({len(configurations)} configurations)")
    for parameters in configurations:
        with EmbeddedStack(ROOT, time_scale=0.001, parameters=parameters) as stack:
            if args.quick:  # one step's fault, another writer and the same change again (the suite runs all 32)
                for again in (False, True):
                    r.writer_in_window_case(stack, Changeflow.for_embedded(stack), r.STEPS[1], "lost", windows,
                                            again=again)
            else:
                r.writers_in_windows(stack, Changeflow.for_embedded(stack), windows)
    tallies.append(windows)
    with EmbeddedStack(ROOT, time_scale=0.002) as stack:
        cf = Changeflow.for_embedded(stack)
        duplicates = r.Tally("3. duplicates")
        ordering = r.Tally("4. out-of-order delivery")
        for seed in range(args.seeds):
            duplicates.add(r.duplicates(cf, seed))
            for concurrency in (4,) if args.quick else (1, 4, 8):
                ordering.add(r.out_of_order(cf, seed, changes=12, concurrency=concurrency))
        tallies += [duplicates, ordering]
        model = r.Tally("5. model-based (hypothesis)")
        counter = iter(range(10**9))

        @settings(max_examples=args.examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(raw=reference_model.change_sequences())
        def run(raw):
            entity = f"model-{next(counter)}"
            reference_model.model_case(stack, cf, entity, reference_model.materialise(entity, raw), model)

        run()
        tallies.append(model)
    from changeflow.local.server import EmbeddedServer

    with EmbeddedServer(port=0, time_scale=0.001) as server:  # POST /changes over HTTP on serve
        api = r.Tally("6. API: retries and redeliveries (POST /changes)")
        for seed in range(args.seeds):
            api.add(r.api_retries(server, seed, entities=2 if args.quick else 12))
        tallies.append(api)
        from changeflow.checks.impersonation import impersonations

        forged = impersonations(server, 0, entities=1 if args.quick else 4)
        for seed in range(1, args.seeds):
            forged.add(impersonations(server, seed, entities=4))
        tallies.append(forged)
    print(r.report(tallies))
    print(f"\n({time.perf_counter() - started:.0f} s; hostile input: see tests/test_hostile_input.py)")
    return 1 if any(t.violations for t in tallies) else 0


if __name__ == "__main__":
    sys.exit(main())
