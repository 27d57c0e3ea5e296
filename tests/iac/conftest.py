"""Paths and parsed copies of the templates shared by the IaC tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"
MINUTES = list(range(5, 16))  # every timeout Azure accepts

# One awkward set of agent settings and the Custom Script Extension command that must come out of both
# templates/windows/custom-script-extension.json and templates/terraform (single quote, double quotes, spaces).
WINDOWS_PIP_ARGS = "--no-index --find-links https://wheels.example/ vmss-terminate"
WINDOWS_AGENT_ARGS = "--hook \"C:\\it's.cmd\""
WINDOWS_COMMAND = (
    "powershell.exe -NoProfile -ExecutionPolicy Bypass -Command \"& .\\install-agent.ps1 "
    "-PipArgs '--no-index --find-links https://wheels.example/ vmss-terminate' "
    "-AgentArgs '--hook \\\"C:\\it''s.cmd\\\"'\"")


def read(relative: str) -> str:
    return (TEMPLATES / relative).read_text(encoding="utf-8")


def load_json(relative: str) -> Dict[str, Any]:
    return json.loads(read(relative))


@pytest.fixture(scope="session")
def cloud_init_text() -> str:
    return read("cloud-init/vmss-terminate.yaml")
