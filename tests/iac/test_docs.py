"""docs/iac.md: every `vmss-terminate` command it shows is accepted by the real CLI."""

from __future__ import annotations

import re
import shlex
from typing import List

import pytest
from helpers import cli_command, invoke_cli

from vmss_terminate.cli import main
from vmss_terminate.iac import render

from .conftest import ROOT

DOC = ROOT / "docs" / "iac.md"


def _commands() -> List[List[str]]:
    found = []
    for raw in DOC.read_text(encoding="utf-8").splitlines():
        line = raw.strip().lstrip("-").strip()
        for prefix in ("run: ", "name: "):
            line = line[len(prefix):] if line.startswith(prefix) else line
        if line.startswith("vmss-terminate "):
            words = shlex.split(line.split(" > ")[0], comments=True)
            found.append([w for w in words if w != "\\"])
    return found


def test_the_doc_shows_the_pipeline_commands() -> None:
    names = {words[1] for words in _commands()}
    assert {"render", "upgrade", "plan"} <= names


@pytest.mark.parametrize("words", [w for w in _commands() if w[1] == "render"], ids=" ".join)
def test_render_examples_run(words: List[str]) -> None:
    result = invoke_cli(main, words[1:])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("words", [w for w in _commands() if w[1] != "render"], ids=" ".join)
def test_other_examples_parse(words: List[str]) -> None:
    command = cli_command(words[1])
    # pipeline variables ($(X) in Azure DevOps, $X / ${X} in shells) stand for real names, which
    # the CLI checks against Azure's naming rules while parsing
    values = {"RESOURCE_GROUP": "rg", "VMSS_NAME": "web"}
    variable = re.compile(r"\$(?:\((\w+)\)|\{(\w+)\}|(\w+))")
    args = [variable.sub(lambda m: values.get(next(g for g in m.groups() if g), m.group(0)), w) for w in words[2:]]
    ctx = command.make_context(words[1], args)
    assert ctx.params["resource_group"] and ctx.params["name"]


def test_the_terraform_example_is_what_render_prints() -> None:
    text = DOC.read_text(encoding="utf-8")
    intro = "`--format terraform --timeout 10m`:\n\n```hcl\n"
    assert intro in text
    shown = text.split(intro, 1)[1].split("```", 1)[0]
    assert shown == render("terraform", "10m")
