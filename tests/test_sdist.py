"""The source distribution is the complete project: `python -m build --sdist` output (built here
with the same PEP 517 backend call, offline) carries the licence, docs, templates, examples and the
whole test tree, and tests run from the unpacked tree against the unpacked package pass."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = [
    "LICENSE", "README.md", "pyproject.toml", "setup.cfg", "docs/cli-reference.md", "docs/control-plane.md",
    "templates/README.md", "templates/systemd", "templates/terraform", "examples/seed.json", "tests/conftest.py",
    "tests/helpers.py", "tests/control/conftest.py", "tests/e2e/e2e_helpers.py", "tests/agent/hook_probe.py",
    "benchmarks", ".ci/run", "vmss_terminate/py.typed",
]
# A small sample that needs conftest.py, helpers.py, a test sub-package and the emulators.
SAMPLE = ["tests/test_timeout.py", "tests/test_cli_root.py", "tests/control/test_inputs.py"]

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if (ROOT / "PKG-INFO").is_file():
        pytest.skip("running from an unpacked sdist: nothing to build")
    # build from a clean copy: a stale *.egg-info/SOURCES.txt in the work tree would be read back
    # into the manifest and hide a missing MANIFEST.in rule
    source = tmp_path_factory.mktemp("source") / "project"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", "build", "dist"))
    out = tmp_path_factory.mktemp("sdist")
    subprocess.run([sys.executable, "-c", f"from setuptools import build_meta; build_meta.build_sdist({str(out)!r})"],
                   cwd=source, check=True, capture_output=True, text=True, timeout=240)
    (archive,) = out.glob("*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(out, filter="data") if sys.version_info >= (3, 12) else tar.extractall(out)
    (tree,) = [p for p in out.iterdir() if p.is_dir()]
    return tree


def test_sdist_carries_licence_docs_templates_examples_and_the_whole_test_tree(unpacked: Path) -> None:
    missing = [name for name in REQUIRED if not (unpacked / name).exists()]
    assert missing == []
    assert "MIT License" in (unpacked / "LICENSE").read_text(encoding="utf-8")
    shipped = {p.relative_to(unpacked / "tests").as_posix() for p in (unpacked / "tests").rglob("*.py")}
    in_repo = {p.relative_to(ROOT / "tests").as_posix() for p in (ROOT / "tests").rglob("*.py")}
    assert in_repo <= shipped


def test_tests_from_the_unpacked_sdist_pass_against_its_own_package(unpacked: Path) -> None:
    where = subprocess.run([sys.executable, "-c", "import vmss_terminate; print(vmss_terminate.__file__)"],
                           cwd=unpacked, capture_output=True, text=True, timeout=60)
    assert Path(where.stdout.strip()).is_relative_to(unpacked), where.stdout
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *SAMPLE],
                          cwd=unpacked, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout
