""".ci/lint on a Python where the [test] extra installs no mypy (< 3.10) or no ruff: skipped, not failed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

LINT = Path(__file__).resolve().parents[1] / ".ci" / "lint"


def test_ci_lint_skips_a_linter_the_test_extra_did_not_install(tmp_path: Path) -> None:
    (tmp_path / ".ci").mkdir()
    shutil.copy(LINT, tmp_path / ".ci" / "lint")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    ruff = bin_dir / "ruff"
    ruff.write_text("#!/bin/sh\necho ruff-ran \"$@\"\n")
    ruff.chmod(0o755)
    result = subprocess.run(["bash", str(tmp_path / ".ci" / "lint")], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "ruff-ran check vmss_terminate vmss_terminate_sim tests benchmarks" in result.stdout
    assert "mypy not installed" in result.stdout and len(result.stdout.splitlines()) == 2
    ruff.unlink()
    result = subprocess.run(["bash", str(tmp_path / ".ci" / "lint")], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and "ruff not installed" in result.stdout
