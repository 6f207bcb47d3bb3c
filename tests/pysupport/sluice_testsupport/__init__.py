"""Support shared by the Python test suites of sluice (tests/python, tests/e2e,
tests/helm): one copy of each helper.

- `ci`: `in_ci` and `fail_or_skip` for missing prerequisites (a failure under `CI`);
- `no_skips_in_ci`: the pytest plugin that turns every skip into a failure when `CI`
  is set (`pytest_plugins = ("sluice_testsupport.no_skips_in_ci",)` in a conftest.py);
- `poll`: `wait_for`, polling until a condition holds;
- `paths`: the repository, the cargo target dir and the workspace binaries;
- `procs`: processes that log to a file, found by their `… on http://ADDR` line, that
  die with the test process;
- `net`: HTTP to 127.0.0.1 that never goes through a proxy from the environment;
- `chaos`: a chaos upstream (`sluice-gateway chaos`) scripted through `/_chaos`;
- `chart`: the Helm chart rendered offline with Helm's Go SDK.

The suites find this package through `pythonpath` in their pytest.ini; the one venv
with every suite's pinned packages is made by `tests/pysupport/venv`.
"""
