"""`render` prints, for every format, the very profile the control plane PATCHes."""

from __future__ import annotations

import json
import shlex
from typing import Any, Dict

import hcl2
import pytest
from helpers import cli_command, invoke_cli

from vmss_terminate.cli import main
from vmss_terminate.control.body import patch_body, patch_bytes
from vmss_terminate.errors import UsageError
from vmss_terminate.iac import FORMATS, render
from vmss_terminate.iac.render import TERRAFORM_FIELDS

from .conftest import MINUTES


def _expected(enable: bool, minutes: Any) -> Dict[str, Any]:
    return patch_body(enable, minutes)["properties"]["virtualMachineProfile"]["scheduledEventsProfile"]


def _cli(*args: str) -> Any:
    return invoke_cli(main, ["render", *args])


@pytest.mark.parametrize("minutes", MINUTES)
def test_rest_is_byte_for_byte_the_patch_body(minutes: int) -> None:
    result = _cli("--format", "rest", "--timeout", f"{minutes}m")
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == patch_bytes(True, minutes)


def test_rest_disable_is_the_disable_body() -> None:
    result = _cli("--format", "rest", "--disable")
    assert result.exit_code == 0
    assert result.stdout_bytes == patch_bytes(False, None)


@pytest.mark.parametrize("spelling", ["10", "10m", "PT10M", "PT600S", "pt0h10m"])
def test_every_timeout_spelling_renders_pt10m(spelling: str) -> None:
    assert json.loads(render("arm", spelling)) == {"scheduledEventsProfile": _expected(True, 10)}


@pytest.mark.parametrize("minutes", MINUTES)
def test_arm_fragment_is_the_control_plane_profile(minutes: int) -> None:
    assert json.loads(render("arm", minutes)) == {"scheduledEventsProfile": _expected(True, minutes)}


@pytest.mark.parametrize("minutes", [5, 10, 15, None])
def test_terraform_block_parses_and_maps_to_the_profile(minutes: Any) -> None:
    text = render("terraform", minutes, enable=minutes is not None)
    parsed = hcl2.loads(text)
    (block,) = parsed["termination_notification"]
    # python-hcl2 >= 7 keeps string literals quoted ('"PT10M"'); older versions do not.
    fields = {k: json.loads(v) if isinstance(v, str) and v.startswith('"') else v
              for k, v in block.items() if not k.startswith("__")}
    expected = _expected(minutes is not None, minutes)["terminateNotificationProfile"]
    assert fields == {TERRAFORM_FIELDS[k]: v for k, v in expected.items()}


@pytest.mark.parametrize("minutes", [5, 10, 15, None])
def test_bicep_fragment_parses_and_is_the_profile(minutes: Any) -> None:
    pycep = pytest.importorskip("pycep", reason="pycep-parser needs Python >= 3.10")
    snippet = render("bicep", minutes, enable=minutes is not None)
    indented = "\n".join("      " + line for line in snippet.splitlines())
    document = (
        "resource vmss 'Microsoft.Compute/virtualMachineScaleSets@2024-11-01' = {\n"
        "  name: 'x'\n  location: 'westeurope'\n  properties: {\n    virtualMachineProfile: {\n"
        f"{indented}\n    }}\n  }}\n}}\n"
    )
    parsed = pycep.BicepParser().parse(text=document)
    profile = parsed["resources"]["vmss"]["config"]["properties"]["virtualMachineProfile"]
    assert profile["scheduledEventsProfile"] == _expected(minutes is not None, minutes)


def test_cli_format_prints_az_and_our_commands() -> None:
    lines = [shlex.split(line) for line in render("cli", "12", resource_group="my rg", name="web").splitlines()
             if not line.startswith("#")]
    assert ["az", "vmss", "update", "--resource-group", "my rg", "--name", "web",
            "--enable-terminate-notification", "true", "--terminate-notification-time", "12"] in lines
    assert ["vmss-terminate", "enable", "-g", "my rg", "-n", "web", "--timeout", "PT12M"] in lines
    assert any(line[:3] == ["az", "vmss", "update-instances"] for line in lines)


@pytest.mark.parametrize("enable", [True, False])
def test_cli_format_commands_parse_with_our_cli(enable: bool) -> None:
    """The printed `vmss-terminate ...` line is accepted by the real command (parsed, not run)."""
    text = render("cli", 10 if enable else None, enable=enable, resource_group="rg", name="web")
    (ours,) = [shlex.split(line) for line in text.splitlines() if line.startswith("vmss-terminate ")]
    command = cli_command(ours[1])
    ctx = command.make_context(ours[1], ours[2:])
    assert (ctx.params["resource_group"], ctx.params["name"]) == ("rg", "web")
    if enable:
        assert ctx.params["timeout"] == 10


def test_cli_format_quotes_hostile_names() -> None:
    text = render("cli", 10, resource_group="rg; rm -rf /", name="$(id)")
    for line in text.splitlines():
        if line.startswith("az vmss update "):
            assert shlex.split(line)[3:7] == ["--resource-group", "rg; rm -rf /", "--name", "$(id)"]


def test_cli_format_without_names_uses_shell_variables() -> None:
    assert '--resource-group "$RESOURCE_GROUP" --name "$VMSS_NAME"' in render("cli", 10)


def test_cli_disable() -> None:
    text = render("cli", None, enable=False, resource_group="rg", name="web")
    assert "--enable-terminate-notification false" in text and "--terminate-notification-time" not in text


@pytest.mark.parametrize("bad", ["4", "16", "3m", "PT5M30S", "PT16M", "ten", "", "-5"])
def test_bad_timeout_is_one_line_exit_2(bad: str) -> None:
    result = _cli("--format", "arm", "--timeout", bad)
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and result.output.startswith("error: ")
    assert "Traceback" not in result.output


@pytest.mark.parametrize("args", [
    ["--format", "arm"],                                   # no timeout
    ["--format", "arm", "--timeout", "10", "--disable"],   # both
    ["--format", "xml", "--timeout", "10"],                # unknown format
    ["--timeout", "10"],                                   # no format
])
def test_bad_combinations_are_one_line_exit_2(args: Any) -> None:
    result = _cli(*args)
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and result.output.startswith("error: ")


def test_library_raises_usage_errors() -> None:
    with pytest.raises(UsageError):
        render("yaml", 10)
    with pytest.raises(UsageError):
        render("arm", 16)
    with pytest.raises(UsageError):
        render("arm", None)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_ends_with_one_newline(fmt: str) -> None:
    if fmt == "eventgrid":  # a subscription's Event Grid setup: no timeout, its names instead
        text = render(fmt, None, subscription="00000000-0000-0000-0000-000000000000", resource_group="rg",
                      storage_account="acct1")
    else:
        text = render(fmt, None if fmt == "kubernetes" else 10)  # the DaemonSet takes no timeout
    assert text.endswith("\n") and not text.endswith("\n\n")
