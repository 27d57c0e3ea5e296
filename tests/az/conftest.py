"""Fixtures for the az compatibility suite: the real `az` (from its own venv, see install_az.py),
`vmss-terminate emulator arm` over HTTPS as a real process, and an isolated az configuration that
can only reach loopback."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple
from urllib.parse import urlsplit

import pytest
from helpers import serving_arm

from .install_az import az_executable, az_venv, installed_version

EXAMPLE_SEED = Path(__file__).resolve().parents[2] / "examples" / "seed.json"

# az must never reach a real Azure host: no telemetry, survey, recommendations (they call a web
# service on errors), MSAL instance discovery or extension installs.
QUIET_AZ = {
    "AZURE_CORE_COLLECT_TELEMETRY": "false",
    "AZURE_CORE_SURVEY_MESSAGE": "false",
    "AZURE_CORE_ERROR_RECOMMENDATION": "off",
    "AZURE_CORE_INSTANCE_DISCOVERY": "false",
    "AZURE_EXTENSION_USE_DYNAMIC_INSTALL": "no",
    "AZURE_CORE_NO_COLOR": "true",
}


SESSION = Path(__file__).with_name("az_session.py")


def find_az() -> Optional[str]:
    """VMSS_TERMINATE_AZ, else the az install_az.py installed, else `az` on PATH."""
    explicit = os.environ.get("VMSS_TERMINATE_AZ")
    if explicit:
        return explicit
    if installed_version(az_venv()):
        return str(az_executable(az_venv()))
    return shutil.which("az")


def az_python(executable: str) -> Optional[str]:
    """The Python of the az install_az.py installed, which can run az_session.py; None for another az
    (an OS package's launcher), which then runs as one process per command."""
    if executable != str(az_executable(az_venv())):
        return None
    python = az_venv() / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    return str(python) if python.is_file() else None


def _closed_port() -> int:
    """A loopback port nothing listens on: the proxy every non-loopback request is sent to, so
    one would fail (and show in the debug log) instead of leaving the machine."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Az:
    """Runs the real az with `--debug`; keeps every debug log to check which hosts were contacted.

    With `python` (az's own interpreter) the commands run one after another in one az_session.py
    process, each on a fresh `get_default_cli()` as a separate `az` run would (az's start-up was
    ~0.7 s of CPU per command); without it, one `az` process per command."""

    executable: str
    env: Dict[str, str]
    python: Optional[str] = None
    debug_logs: List[str] = field(default_factory=list)
    _session: "Optional[subprocess.Popen[str]]" = None

    def __call__(self, *args: str) -> Any:
        code, stdout, stderr = self._run([*args, "--debug", "--output", "json"])
        self.debug_logs.append(stderr)
        if code != 0:
            errors = [line for line in stderr.splitlines() if line.startswith("ERROR")]
            raise AssertionError(f"az {' '.join(args)} exited {code}: {errors or stderr[-2000:]}")
        return json.loads(stdout) if stdout.strip() else None

    def _run(self, args: List[str]) -> Tuple[int, str, str]:
        if self.python is None:
            done = subprocess.run([self.executable, *args], env=self.env, capture_output=True, text=True,
                                  timeout=180)
            return done.returncode, done.stdout, done.stderr
        if self._session is None:
            self._session = subprocess.Popen([self.python, str(SESSION)], env=dict(self.env, AZ_INSTALLER="PIP"),
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._session.stdin is not None and self._session.stdout is not None
        self._session.stdin.write(json.dumps({"args": args}) + "\n")
        self._session.stdin.flush()
        answer = self._session.stdout.readline()  # bounded by the test's timeout marker
        if not answer:
            raise AssertionError(f"az_session.py ended (exit {self._session.wait()}) before answering az {args}")
        done = json.loads(answer)
        return int(done["exit_code"]), str(done["stdout"]), str(done["stderr"])

    def close(self) -> None:
        if self._session is not None:
            assert self._session.stdin is not None
            self._session.stdin.close()
            try:
                self._session.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._session.kill()
                self._session.wait()
            self._session = None

    def contacted(self) -> Set[str]:
        """host:port of every connection and every request URL in the debug logs."""
        seen: Set[str] = set()
        for log in self.debug_logs:
            seen.update(re.findall(r"Starting new HTTPS? connection \(\d+\): (\S+)", log))
            for url in re.findall(r"Request URL: '([^']+)'", log):
                parts = urlsplit(url)
                seen.add(f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}")
        return seen


@dataclass
class AzWorld:
    az: Az
    connect: Dict[str, str]  # the emulator's env JSON (IDENTITY_*, VMSS_TERMINATE_ARM_ENDPOINT, ...)
    ca: Path

    @property
    def arm_url(self) -> str:
        return self.connect["VMSS_TERMINATE_ARM_ENDPOINT"]


@pytest.fixture(scope="module")
def az_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzWorld]:
    executable = find_az()
    if executable is None:
        pytest.skip("azure-cli not installed (python3 tests/az/install_az.py installs it outside the repo)")
    trustme = pytest.importorskip("trustme")
    tmp = tmp_path_factory.mktemp("az")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp / "server.pem"))
    with serving_arm("--seed", str(EXAMPLE_SEED), "--tls-cert", str(tmp / "server.pem"),
                     "--lro-retry-after", "1") as lines:
        connect: Dict[str, str] = json.loads(lines[-1].split(":", 1)[1])
        proxy = f"http://127.0.0.1:{_closed_port()}"
        env = dict(QUIET_AZ, PATH=os.environ.get("PATH", ""), HOME=str(tmp / "home"), LANG="C.UTF-8",
                   AZURE_CONFIG_DIR=str(tmp / "azure"), REQUESTS_CA_BUNDLE=str(tmp / "ca.pem"),
                   HTTP_PROXY=proxy, HTTPS_PROXY=proxy, NO_PROXY="127.0.0.1,localhost",
                   IDENTITY_ENDPOINT=connect["IDENTITY_ENDPOINT"], IDENTITY_HEADER=connect["IDENTITY_HEADER"])
        az = Az(executable, env, python=az_python(executable))
        try:
            yield AzWorld(az, connect, tmp / "ca.pem")
        finally:
            az.close()
