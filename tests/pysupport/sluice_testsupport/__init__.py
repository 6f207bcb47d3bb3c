"""Support shared by the Python test suites of sluice (tests/python, tests/e2e,
tests/helm, tests/kube): one copy of each helper.

- `ci`: `in_ci` and `fail_or_skip` for missing prerequisites (a failure under `CI`);
- `no_skips_in_ci`: the pytest plugin that turns every skip into a failure when `CI`
  is set (`pytest_plugins = ("sluice_testsupport.no_skips_in_ci",)` in a conftest.py);
- `poll`: `wait_for`, polling until a condition holds;
- `paths`: the repository, the cargo target dir and the workspace binaries;
- `procs`: processes that log to a file, found by their `… on http://ADDR` line, that
  die with the test process;
- `net`: HTTP to 127.0.0.1 that never goes through a proxy from the environment;
- `chaos`: a chaos upstream (`sluice-gateway chaos`) scripted through `/_chaos`;
- `chart`: the Helm chart rendered offline with Helm's Go SDK;
- `controlplane`: a real etcd + kube-apiserver (+ kube-controller-manager) for tests,
  with an audit log of what ServiceAccounts do (tests/kube);
- `realkube`: one scenario of that control plane with the interface of tests/e2e's
  `KubeFake` (its namespaces, its release, the audit log read as a request log);
- `kubeapi`: raw Kubernetes API calls from a kubeconfig (HTTPS, token or client cert);
- `tcpproxy`: a TCP proxy whose connections a test can cut (a watch broken mid-stream);
- `steps`: the pytest plugin of scenario suites (a failed step fails the later ones;
  `DIAGNOSTICS` attached to a failed step's report).

The suites find this package through `pythonpath` in their pytest.ini; the one venv
with every suite's pinned packages is made by `tests/pysupport/venv`.
"""
