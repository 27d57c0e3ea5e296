"""Issue 20 item 8: what `emulator arm`, `sandbox`, `enable --no-wait` and `demo` print for the
user to do next is usable: a status command that runs (or none), names Azure would accept, a
no-wait that says the set already matches, a demo that blames its deadline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

from helpers import invoke_cli, serving_arm

from vmss_terminate.cli import main

EXAMPLE_SEED = Path(__file__).resolve().parents[1] / "examples" / "seed.json"


def test_emulator_arm_prints_a_status_command_that_runs_or_none() -> None:
    with serving_arm("--port", "0") as lines:
        text = "".join(lines)
    assert "vmss-terminate status --arm-endpoint" not in text and "no scale sets yet" in text
    with serving_arm("--port", "0", "--seed", str(EXAMPLE_SEED)) as lines:
        connect: Dict[str, Any] = json.loads(lines[-1].split(":", 1)[1])
        (status,) = [line.strip() for line in lines if line.strip().startswith("vmss-terminate status ")]
        env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
        env.update({k: v for k, v in connect.items() if k.startswith("IDENTITY_")})  # the credential only
        env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
        done = subprocess.run(["bash", "-c", status], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (status, done.stderr)


def test_sandbox_refuses_names_azure_would_refuse() -> None:
    for args, words in ((["--name", "bad name"], "invalid --name 'bad name'"),
                        (["--resource-group", ""], "invalid --resource-group ''")):
        result = invoke_cli(main, ["sandbox", "--duration", "0", *args])
        assert result.exit_code == 2, result.output
        assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_demo_with_too_short_a_deadline_blames_the_deadline() -> None:
    from vmss_terminate_sim.sandbox.demo import DemoOptions, run_demo

    result = run_demo(DemoOptions(deadline=0.001))  # over before the agents can be running
    assert not result.ok and result.failure is not None
    assert result.failure.startswith("the 0.001 s deadline passed before every agent was running"), result.failure
    assert "--deadline" in result.failure


def _run_printed(line: str, connect: Dict[str, Any]) -> "subprocess.CompletedProcess[str]":
    """Run a printed line with only the credential's variables from the banner (no CA bundle from
    the environment: the line must carry what it needs)."""
    env = {k: v for k, v in os.environ.items()
           if "proxy" not in k.lower() and k not in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")}
    env.update({k: v for k, v in connect.items() if k.startswith("IDENTITY_")})  # the credential only
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True, timeout=120)


def test_emulator_arm_over_tls_prints_a_status_command_that_carries_its_ca(tmp_path: Path) -> None:
    """Issue 28 item 7: the HTTPS banner's status line ran without REQUESTS_CA_BUNDLE and failed
    certificate verification; now it carries the CA (--tls-ca), and without one it prints no line."""
    import pytest

    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    tls = ("--tls-cert", str(tmp_path / "server.pem"), "--seed", str(EXAMPLE_SEED))
    with serving_arm("--port", "0", *tls, "--tls-ca", str(tmp_path / "ca.pem")) as lines:
        connect: Dict[str, Any] = json.loads(lines[-1].split(":", 1)[1])
        (status,) = [line.strip() for line in lines if "vmss-terminate status " in line]
        assert status.startswith("REQUESTS_CA_BUNDLE="), status
        done = _run_printed(status, connect)
    assert done.returncode == 0, (status, done.stderr)
    with serving_arm("--port", "0", *tls) as lines:  # a CA-signed certificate and no --tls-ca
        text = "".join(lines)
    assert "vmss-terminate status " not in text and "--tls-ca" in text
