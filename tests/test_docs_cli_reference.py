"""docs/cli-reference.md and the click commands must agree, both ways.

If this fails after you changed a command, regenerate the reference:
    python -m vmss_terminate.cli > docs/cli-reference.md
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Set, Tuple

from vmss_terminate.cli import main
from vmss_terminate.commands.docgen import documented_params, param_names, render, walk

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli-reference.md"
HEADING = re.compile(r"^#{2,6} `(vmss-terminate[^`]*)`\s*$")
ROW = re.compile(r"^\| (.+?) \| ")


def _documented() -> Dict[str, Set[str]]:
    """Command path -> names listed in the first column of its option table."""
    sections: Dict[str, Set[str]] = {}
    current = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = HEADING.match(line)
        if match:
            current = match.group(1)
            assert current not in sections, f"{current} documented twice"
            sections[current] = set()
            continue
        row = ROW.match(line)
        if current and row and row.group(1) not in ("option", "---"):
            # each code span is `--option METAVAR`, `-o METAVAR`, `--flag` or `ARGUMENT`
            sections[current] |= {span.split()[0] for span in re.findall(r"`([^`]+)`", row.group(1))}
    return sections


def _cli() -> Dict[str, Set[str]]:
    tree: Dict[str, Set[str]] = {}
    for path, command in walk(main):
        tree[" ".join(path)] = {n for p in documented_params(command) for n in param_names(p)}
    return tree


def _assert_covered(names: Dict[str, Set[str]], by: Dict[str, Set[str]], commands_msg: str, options_msg: str) -> None:
    """Every command of `names` is in `by`, and so is each of its option names."""
    missing_commands = sorted(set(names) - set(by))
    assert not missing_commands, f"{commands_msg} {missing_commands}"
    for command, options in names.items():
        missing = sorted(options - by[command])
        assert not missing, f"{command}: {options_msg} {missing}"


def test_every_command_and_option_is_documented() -> None:
    _assert_covered(_cli(), _documented(), "undocumented commands", "undocumented options")


def test_nothing_documented_is_missing_from_the_cli() -> None:
    _assert_covered(_documented(), _cli(), "documented commands that do not exist:",
                    "documented options that do not exist:")


def test_core_commands_are_in_the_reference() -> None:
    documented = _documented()
    for command in ("vmss-terminate demo", "vmss-terminate sandbox"):
        assert command in documented
    assert {"--instances", "--scale-in", "--timeout", "--speed", "--output"} <= documented["vmss-terminate demo"]


def test_generator_covers_every_command() -> None:
    text = render(main)
    paths: Tuple[str, ...] = tuple(" ".join(p) for p, _ in walk(main))
    for path in paths:
        assert f"`{path}`" in text


def test_exit_codes_name_the_agent_run_clean_stop_exception() -> None:
    # `agent run` exits 0 on a clean stop (docs/agent.md), not the 130/143 the other commands use
    intro = " ".join(render(main).split("\n## ", 1)[0].split())
    assert "(`agent run`, `emulator ...`, `sandbox`) treat Ctrl-C and SIGTERM as their normal stop: " \
           "they shut down cleanly and exit 0" in intro
