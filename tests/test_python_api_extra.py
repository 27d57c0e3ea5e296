"""The Python API on the lean install (no `[control]` extra): entry points that need the Azure SDK
raise the CLI's MissingExtraError naming the install command, not `ModuleNotFoundError: azure`.
Simulated with tests/no_azure.py's import blocker in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TESTS = str(Path(__file__).resolve().parent)
CALLS = {
    "control.status": "from vmss_terminate import control\n"
                      "control.status('rg', 'web', connection=control.Connection(\n"
                      "    subscription_id='00000000-0000-0000-0000-000000000000', arm_endpoint='http://127.0.0.1:9'))",
    "fleet.audit": "import os\nos.environ['VMSS_TERMINATE_ARM_ENDPOINT'] = 'http://127.0.0.1:9'\n"
                   "from vmss_terminate.fleet import audit\naudit()",
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_python_api_without_control_extra_raises_missing_extra_error(call: str) -> None:
    code = (f"import sys\nsys.path.insert(0, {TESTS!r})\nfrom no_azure import _Blocker\n"
            "sys.meta_path.insert(0, _Blocker())\n"
            "from vmss_terminate.extras import MissingExtraError\n"
            f"try:\n    {CALLS[call].replace(chr(10), chr(10) + '    ')}\n"
            "except MissingExtraError as exc:\n    print('MISSING', exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'vmss-terminate[control]'" in proc.stdout and proc.stdout.startswith("MISSING")
