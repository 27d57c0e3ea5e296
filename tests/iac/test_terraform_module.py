"""templates/terraform: parsed by python-hcl2; evaluated by terraform itself when it is installed."""

from __future__ import annotations

import ast
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Dict, List

import hcl2
import pytest

from vmss_terminate.iac import render
from vmss_terminate.iac.render import TERRAFORM_FIELDS, scheduled_events_profile

from .conftest import MINUTES, TEMPLATES, WINDOWS_AGENT_ARGS, WINDOWS_COMMAND, WINDOWS_PIP_ARGS

MODULE = TEMPLATES / "terraform"
RESOURCES = ("azurerm_linux_virtual_machine_scale_set", "azurerm_windows_virtual_machine_scale_set")


def _unquote(key: str) -> str:
    return key[1:-1] if key.startswith('"') and key.endswith('"') else key


def _load(name: str) -> Dict[str, Any]:
    with open(MODULE / name, encoding="utf-8") as handle:
        return hcl2.load(handle)


def _variables() -> Dict[str, Any]:
    return {_unquote(k): v for block in _load("variables.tf")["variable"] for k, v in block.items()}


def _locals() -> Dict[str, Any]:
    return {k: v for block in _load("locals.tf")["locals"] for k, v in block.items()}


def _resources() -> Dict[str, Any]:
    found = {}
    for block in _load("main.tf")["resource"]:
        for kind, named in block.items():
            for body in named.values():
                found[_unquote(kind)] = body
    return found


_ALLOWED = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.Compare, ast.GtE, ast.LtE, ast.Gt, ast.Lt, ast.Eq,
            ast.NotEq, ast.Call, ast.Name, ast.Load, ast.Constant, ast.Subscript, ast.UnaryOp, ast.Not, ast.USub)


def _hcl_eval(expression: str, variables: Dict[str, Any]) -> Any:
    """Evaluate a small HCL expression (`${var.x >= 5 && floor(var.x) == var.x}`) over variable values."""
    text = expression[2:-1] if expression.startswith("${") and expression.endswith("}") else expression
    text = re.sub(r"\bvar\.([A-Za-z_][A-Za-z0-9_]*)", r"V['\1']", text)
    text = text.replace("&&", " and ").replace("||", " or ")
    text = re.sub(r"!(?!=)", " not ", text)
    tree = ast.parse(text, mode="eval")
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise AssertionError(f"unsupported HCL construct in {expression!r}: {type(node).__name__}")
    return eval(compile(tree, "<hcl>", "eval"), {"__builtins__": {}}, {"V": variables, "floor": math.floor})


def _interpolate(template: str, variables: Dict[str, Any]) -> str:
    text = json.loads(template) if template.startswith('"') else template
    return re.sub(r"\$\{var\.([A-Za-z0-9_]+)\}", lambda m: str(variables[m.group(1)]), text)


def test_every_file_parses() -> None:
    for path in sorted(MODULE.glob("*.tf")):
        with open(path, encoding="utf-8") as handle:
            assert hcl2.load(handle), path.name


@pytest.mark.parametrize("kind", RESOURCES)
def test_both_scale_set_kinds_carry_termination_notification(kind: str) -> None:
    (block,) = _resources()[kind]["termination_notification"]
    assert block["enabled"] == "${var.terminate_notification_enabled}"
    assert block["timeout"] == "${local.terminate_notification_timeout}"


def test_windows_scale_set_runs_the_install_script() -> None:
    (extension,) = _resources()["azurerm_windows_virtual_machine_scale_set"]["dynamic"]
    content = extension['"extension"' if '"extension"' in extension else "extension"]["content"][0]
    assert "local.windows_install_command" in content["protected_settings"]
    assert "var.windows_install_script_uri" in content["protected_settings"]


def test_block_has_the_fields_render_prints() -> None:
    rendered = hcl2.loads(render("terraform", 10))["termination_notification"][0]
    for kind in RESOURCES:
        (block,) = _resources()[kind]["termination_notification"]
        assert {k for k in block if not k.startswith("__")} == {k for k in rendered if not k.startswith("__")}
    assert set(TERRAFORM_FIELDS.values()) == {"enabled", "timeout"}


def test_minutes_variable_validates_5_to_15() -> None:
    variable = _variables()["terminate_notification_minutes"]
    (validation,) = variable["validation"]
    condition = validation["condition"]
    for minutes in MINUTES:
        assert _hcl_eval(condition, {"terminate_notification_minutes": minutes}) is True
    for minutes in (0, 4, 16, 30, 7.5, -10):
        assert _hcl_eval(condition, {"terminate_notification_minutes": minutes}) is False


@pytest.mark.parametrize("minutes", MINUTES)
def test_timeout_local_is_the_control_plane_value(minutes: int) -> None:
    timeout = _interpolate(_locals()["terminate_notification_timeout"], {"terminate_notification_minutes": minutes})
    assert timeout == scheduled_events_profile(True, minutes)["terminateNotificationProfile"]["notBeforeTimeout"]


# -- terraform itself (optional: CI machines may not have it) ---------------------------------------

def _offline_terraform() -> List[str]:
    if shutil.which("terraform") is None:
        pytest.skip("terraform is not installed; the python-hcl2 checks above still ran")
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-rn", "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot run terraform without network (unshare -rn unavailable); tests never reach the internet")
    return [unshare, "-rn", "terraform"]


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The module's variables.tf and locals.tf, plus outputs for the locals: no provider, so no download."""
    terraform = _offline_terraform()
    root = tmp_path_factory.mktemp("tf")
    (root / "terraform").mkdir()
    (root / "cloud-init").mkdir()
    for name in ("variables.tf", "locals.tf"):
        shutil.copy(MODULE / name, root / "terraform" / name)
    shutil.copy(TEMPLATES / "cloud-init" / "vmss-terminate.yaml", root / "cloud-init" / "vmss-terminate.yaml")
    (root / "terraform" / "probe.tf").write_text(
        'output "timeout" { value = local.terminate_notification_timeout }\n'
        'output "cloud_init" { value = local.cloud_init }\n'
        'output "image" { value = local.image }\n'
        'output "windows_install_command" { value = local.windows_install_command }\n')
    env = {**os.environ, "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1", "TF_CLI_CONFIG_FILE": os.devnull,
           "TF_DATA_DIR": str(root / ".terraform")}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*terraform, *args, "-no-color"], cwd=root / "terraform", env=env,
                              capture_output=True, text=True, timeout=60)

    init = run("init", "-input=false", "-backend=false")
    assert init.returncode == 0, init.stderr
    return run


REQUIRED_VARS = ["-var", "name=web", "-var", "resource_group_name=rg", "-var", "location=westeurope",
                 "-var", "subnet_id=/subnets/a"]


def test_terraform_fmt_accepts_the_module() -> None:
    terraform = _offline_terraform()
    result = subprocess.run([*terraform, "fmt", "-check", "-diff", "-no-color", str(MODULE)],
                            env={**os.environ, "CHECKPOINT_DISABLE": "1", "TF_CLI_CONFIG_FILE": os.devnull},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("minutes", ["4", "16", "7.5"])
def test_terraform_refuses_out_of_range_minutes(probe: Any, minutes: str) -> None:
    result = probe("plan", "-input=false", *REQUIRED_VARS, "-var", f"terminate_notification_minutes={minutes}")
    assert result.returncode != 0
    assert "terminate_notification_minutes must be a whole number of minutes from 5 to 15" in \
        " ".join(result.stderr.split())


def test_terraform_evaluates_the_locals(probe: Any, tmp_path: Path) -> None:
    state = str(tmp_path / "probe.tfstate")
    applied = probe("apply", "-auto-approve", "-input=false", f"-state={state}", *REQUIRED_VARS,
                    "-var", "terminate_notification_minutes=15",
                    "-var", f"agent_pip_args={WINDOWS_PIP_ARGS}", "-var", f"agent_args={WINDOWS_AGENT_ARGS}")
    assert applied.returncode == 0, applied.stderr
    shown = probe("output", f"-state={state}", "-json")
    outputs = {k: v["value"] for k, v in json.loads(shown.stdout).items()}
    assert outputs["timeout"] == "PT15M"
    assert f"VMSS_TERMINATE_PIP_ARGS={WINDOWS_PIP_ARGS}\n" in outputs["cloud_init"]
    assert outputs["image"]["publisher"] == "Canonical"
    assert outputs["windows_install_command"] == WINDOWS_COMMAND
