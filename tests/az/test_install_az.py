"""The az installer's cache: a matching install is reused without pip; a different version is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from . import install_az


def _fake_install(root: Path, version: str) -> None:
    az = install_az.az_executable(root)
    az.parent.mkdir(parents=True)
    az.write_text("#!/bin/sh\n")
    (root / ".vmss-terminate-az-version").write_text(version + "\n")


def test_a_cached_install_is_reused_without_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "az-venv"
    _fake_install(root, install_az.AZ_VERSION)
    monkeypatch.setenv("VMSS_TERMINATE_AZ_VENV", str(root))
    monkeypatch.delenv("VMSS_TERMINATE_AZ_VERSION", raising=False)
    monkeypatch.setattr(install_az, "install", lambda *a: pytest.fail("reinstalled a cached az"))
    assert install_az.main() == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(install_az.az_executable(root)) and "cached" in out.err


def test_another_version_or_a_broken_venv_is_not_cached(tmp_path: Path) -> None:
    root = tmp_path / "az-venv"
    assert install_az.installed_version(root) == ""
    _fake_install(root, "2.0.0")
    assert install_az.installed_version(root) == "2.0.0" != install_az.AZ_VERSION
    install_az.az_executable(root).unlink()
    assert install_az.installed_version(root) == ""
