"""`vmss-terminate emulator arm -o json`: the banner as one JSON document on stdout, nothing else."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest
import requests

from .conftest import SUB

pytestmark = pytest.mark.timeout(60)

EXAMPLE_SEED = Path(__file__).resolve().parents[2] / "examples" / "seed.json"


def _read_document(proc: "subprocess.Popen[str]") -> Dict[str, Any]:
    """Lines of stdout up to the document's closing brace (echo_json indents, so it ends with `}` alone)."""
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.rstrip("\n") == "}":
            return json.loads("".join(lines))  # type: ignore[no-any-return]
    raise AssertionError(f"process ended before its JSON document: {lines}")


def test_json_output_is_one_document_whose_urls_and_status_command_work() -> None:
    proc = subprocess.Popen([sys.executable, "-u", "-m", "vmss_terminate", "emulator", "arm", "--port", "0",
                             "--seed", str(EXAMPLE_SEED), "-o", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        doc = _read_document(proc)
        env = doc["env"]
        assert set(env) >= {"IDENTITY_ENDPOINT", "IDENTITY_HEADER", "VMSS_TERMINATE_ARM_ENDPOINT",
                            "AZURE_SUBSCRIPTION_ID"}
        assert env["VMSS_TERMINATE_ARM_ENDPOINT"] == doc["url"] and env["AZURE_SUBSCRIPTION_ID"] == SUB
        assert doc["tls"] is None
        assert any(ss["id"].endswith("/virtualMachineScaleSets/webvmss") for ss in doc["scaleSets"])
        token = requests.get(env["IDENTITY_ENDPOINT"], timeout=5,
                             params={"api-version": "2019-08-01", "resource": "https://management.azure.com"},
                             headers={"X-IDENTITY-HEADER": env["IDENTITY_HEADER"]}).json()["access_token"]
        subs = requests.get(f"{doc['url']}/subscriptions", params={"api-version": "2022-12-01"}, timeout=5,
                            headers={"Authorization": f"Bearer {token}"})
        assert SUB in [s["subscriptionId"] for s in subs.json()["value"]]
        # The status command runs as printed, with the printed exports.
        argv = shlex.split(doc["statusCommand"])
        assert argv[0] == "vmss-terminate"
        bindir = str(Path(sys.executable).parent)
        run_env = dict(os.environ, **env, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
        status = subprocess.run(argv, env=run_env, capture_output=True, text=True, timeout=60)
        assert status.returncode == 0, status.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        out, _err = proc.communicate(timeout=20)
    assert out.strip() == ""  # nothing but the document on stdout
