#!/usr/bin/env python3
"""Entry point of sluice's benchmark suite: `bench/run` execs this with the bench
virtualenv's Python. The suite itself is the `sluice_bench` package next to this file
(start at `sluice_bench/main.py`); see bench/README.md."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sluice_bench.main import main  # noqa: E402 - after the path it is found on

if __name__ == "__main__":
    sys.exit(main())
