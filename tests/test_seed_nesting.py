"""A seed or scenario nested deeper than the JSON parser's stack is bad input: one line naming the file,
exit 2 -- not 'unexpected RecursionError' (issue 28 item 10)."""
from __future__ import annotations

from pathlib import Path
from typing import List

import pytest
from helpers import invoke_cli

from vmss_terminate.cli import main


@pytest.mark.parametrize("command", [["emulator", "arm", "--seed"], ["emulator", "kube", "--seed"],
                                     ["emulator", "imds", "--scenario"]])
def test_a_deeply_nested_seed_is_refused_naming_the_file(tmp_path: Path, command: List[str]) -> None:
    deep = tmp_path / "deep-seed.json"
    deep.write_text("[" * 200_000)
    result = invoke_cli(main, [*command, str(deep)])
    assert result.exit_code == 2, result.output
    assert str(deep) in result.output and "nested too deeply" in result.output
    assert "RecursionError" not in result.output and "Traceback" not in result.output
