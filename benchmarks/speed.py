"""Speed of the ensemble; writes docs/benchmarks/speed-BACKEND.{md,json,png}.

    ./run python benchmarks/speed.py [--backend llamacpp] [--length 64 ...] [--repeats 3]

The same as ``specem bench --out docs/benchmarks``; see ``specem bench --help``.
"""

import sys

from specem_chain.cli import app

if __name__ == "__main__":
    app(["bench", "--out", "docs/benchmarks", *sys.argv[1:]])
