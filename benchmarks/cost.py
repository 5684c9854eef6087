"""``make cost``: the cost model of the toolkit (``changeflow.cost``) run and printed; see
``changeflow.cost.report`` for what it measures and its options.

    .venv/bin/python benchmarks/cost.py [--json] [--no-build] [--contention 1,10,50,200] [--time-scale 1]
                                        [--compare-today] [--contention-only] [--units-only]
"""

from pathlib import Path

from changeflow.cost.report import main

if __name__ == "__main__":
    main(root=Path(__file__).resolve().parent.parent)
