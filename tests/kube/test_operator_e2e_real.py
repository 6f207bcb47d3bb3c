"""The operator end-to-end scenario on the real control plane: the steps of
tests/e2e/test_operator_e2e.py, imported unchanged, with `kube` a scenario of the
session's kube-apiserver (conftest.py) instead of a kube-fake.

What the real server adds: the operator authenticates as the chart's ServiceAccount (a
TokenRequest token; the chart's ServiceAccount, ClusterRole and ClusterRoleBinding
rendered and applied), so the chart's RBAC is enforced on every call; server-side apply,
the status subresource, defaulting, owner references (OwnerReferencesPermissionEnforcement
on), garbage collection and namespaces are the real ones; step 11 writes an AccountLimit into
the ledger as the chart's ServiceAccount; step 12 reads the operator's
calls from the apiserver's audit log instead of kube-fake's request log.
"""

from __future__ import annotations

import pytest

from test_operator_e2e import *  # noqa: F401,F403 - the steps and their `env` fixture

pytestmark = pytest.mark.step
