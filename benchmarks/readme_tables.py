"""The documentation's measured tables rendered from the benchmarks' JSON output into the pages' marked
blocks: a thin caller of ``changeflow.cost.pages`` (what it renders, and its options).

    .venv/bin/python benchmarks/readme_tables.py build/bench/cost.json [build/bench/embedded_vs_direct.json]
        [--page FILE ...] [--no-readme]
"""

import sys
from pathlib import Path

from changeflow.cost.pages import main

if __name__ == "__main__":
    sys.exit(main(root=Path(__file__).resolve().parent.parent))
