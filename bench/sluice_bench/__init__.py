"""sluice's benchmark suite; `bench/run` (through `bench/run.py`) runs `main.main()`.
See bench/README.md for what is measured and how.

The parts: `settings` (paths, the two modes), `procs` (processes: start, pin, measure,
stop), `systems` (the systems under test, their configurations and the Postgres bench
database), `load` (oha runs and the "other work" accounting), `clients` (streams and
failover requests), `phases` (callgrind, streaming, failover, LiteLLM), `host`
(machine, versions, gateway logs), and `stats`, `plot` and `report` (BENCHMARKS.md).
"""
