"""What a scheduled digest costs (issue 35): the model in the toolkit (``changeflow.cost.digests``) run and
printed, its JSON in build/bench/digests.json. Part of ``make cost``.

    .venv/bin/python benchmarks/digests.py [--sizes 1000,100000] [--compute 100000,1000000]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from changeflow.cost import digests

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,100000", help="entities on the embedded stack (measured)")
    parser.add_argument("--compute", default="1000,100000,1000000",
                        help="entities for the function's own work alone (the larger ones projected)")
    parser.add_argument("--output", default=str(ROOT / "build" / "bench" / "digests.json"))
    args = parser.parse_args()
    sizes = [digests.measure(int(n)) for n in args.sizes.split(",")]
    compute = [digests.measure_compute(int(n)) for n in args.compute.split(",")]
    result = digests.report(sizes, compute)
    result["sizes"] = sizes
    digests.write(Path(args.output), result)
    print(digests.markdown(result))
    for work in compute:
        print(json.dumps(work))
    print(f"the changes index: ${result['index_usd_per_million_changes']:.2f} per million changes")


if __name__ == "__main__":
    main()
