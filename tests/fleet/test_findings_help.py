"""`fleet audit --help` names every finding an audit can report, read from the findings table
(`fleet.findings.FINDINGS`), so a new finding reaches the help and docs/cli-reference.md without a
second list to keep."""

from __future__ import annotations

import re

from click.testing import CliRunner

from vmss_terminate.cli import main
from vmss_terminate.fleet import FINDINGS


def test_the_audit_help_lists_the_findings_table() -> None:
    result = CliRunner().invoke(main, ["fleet", "audit", "--help"], terminal_width=1000)
    assert result.exit_code == 0, result.output
    listed = re.search(r"findings \(([^)]*)\)", " ".join(result.output.split()))
    assert listed is not None, result.output
    assert listed.group(1).split(", ") == list(FINDINGS)
