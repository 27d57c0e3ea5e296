"""The sandbox passes its environment instead of mutating `os.environ`: the control plane reaches it
through `connection()` (which carries the sandbox's own credential), and a child process through
`env()`; the process environment is the same before, during and after."""

from __future__ import annotations

import os

import pytest
from e2e_helpers import running

from vmss_terminate.control import enable, status
from vmss_terminate.control.upgrade import UpgradeOptions
from vmss_terminate.errors import AzureError
from vmss_terminate_sim.sandbox.environment import TokenEndpointCredential


def test_the_control_plane_reaches_the_sandbox_without_the_process_environment() -> None:
    before = dict(os.environ)
    with running(instances=2, timeout_minutes=None, speed=10.0) as box:
        rg, name = box.config.resource_group, box.config.name
        result = enable(rg, name, 5, connection=box.connection(), options=UpgradeOptions(upgrade=False))
        assert result.changed and dict(os.environ) == before
        assert status(rg, name, connection=box.connection()).profile.timeout == "PT5M"
        env = box.env()
        assert {"IDENTITY_ENDPOINT", "IDENTITY_HEADER", "VMSS_TERMINATE_ARM_ENDPOINT"} <= set(env)
        assert "IDENTITY_ENDPOINT" not in os.environ
    assert dict(os.environ) == before


def test_a_refused_token_request_is_one_azure_error() -> None:
    with running(instances=1, timeout_minutes=None) as box:
        wrong = TokenEndpointCredential(box.env()["IDENTITY_ENDPOINT"], "not-the-secret")
        with pytest.raises(AzureError, match="the sandbox token endpoint gave no token"):
            wrong.get_token("https://management.azure.com/.default")
        token = box.credential().get_token("https://management.azure.com/.default")
        assert token.token and token.expires_on > 0
