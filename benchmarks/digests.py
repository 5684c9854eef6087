"""What a scheduled digest costs (issue 35): the model in the toolkit (``changeflow.cost.digests``) run and
printed, its JSON in build/bench/digests.json. Part of ``make cost``, which measures 10^3 and 10^4 entities on
the embedded stack (about a minute) and projects 10^5 and 10^6 from 10^4; ``--full`` measures 10^5 too, the
figures docs/cost.md shows (about 25 minutes here: moto answers each Query of the index by reading the
whole table).

    .venv/bin/python benchmarks/digests.py [--full] [--sizes 1000,10000] [--compute 1000,100000,1000000]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from changeflow.cost import digests

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="measure 10^3 and 10^5 (docs/cost.md's run)")
    parser.add_argument("--sizes", default=None, help="entities on the embedded stack, measured (default "
                                                      "1000,10000; with --full 1000,100000)")
    parser.add_argument("--compute", default="1000,100000,1000000",
                        help="entities for the function's own work alone (those not measured projected)")
    parser.add_argument("--output", default=str(ROOT / "build" / "bench" / "digests.json"))
    args = parser.parse_args()
    measured = [int(n) for n in (args.sizes or ("1000,100000" if args.full else "1000,10000")).split(",")]
    sizes = [digests.measure(n) for n in measured]
    # the function's own work at every size, measured ones too (a projection subtracts the largest's)
    compute = [digests.measure_compute(n) for n in sorted({*measured, *map(int, args.compute.split(","))})]
    result = digests.report(sizes, compute)
    result["sizes"] = sizes
    digests.write(Path(args.output), result)
    print(digests.markdown(result))
    for work in compute:
        print(json.dumps(work))


if __name__ == "__main__":
    main()
