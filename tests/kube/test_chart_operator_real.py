"""The chart's operator Deployment on the real control plane: the steps of
tests/e2e/test_chart_operator.py, imported unchanged, with `new_kube` giving each
parameter (default values, leader election) a scenario of the session's kube-apiserver
(conftest.py) instead of a kube-fake.

What the real server adds: `kubectl apply` of every rendered manifest is admitted by a
real apiserver; the mini-kubelet gives the operator pod a TokenRequest token of the
chart's ServiceAccount, so the chart's ClusterRole (and, with election, its Role) is
enforced; the Lease is a real coordination.k8s.io Lease; the RBAC step reads the
operator's calls from the audit log.
"""

from __future__ import annotations

import pytest

from test_chart_operator import *  # noqa: F401,F403 - the steps and their `install` fixture

pytestmark = pytest.mark.step
