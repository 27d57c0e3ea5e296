"""docs/iac.md: every `vmss-terminate` command it shows is accepted by the real CLI."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
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


KUBERNETES_DOC = ROOT / "docs" / "kubernetes.md"


def test_the_kubernetes_docs_apply_to_the_emulator_runs_as_written(tmp_path: Path) -> None:
    """Issue 28 item 8: `render ... | kubectl apply -f -` against the emulator fails ("failed to
    download openapi": it serves no OpenAPI schema); the doc's emulator line carries
    --validate=false and runs as written (REGISTRY/VERSION are only strings in the manifest)."""
    import os
    import subprocess
    import sys

    from kube_helpers import KUBECTL, SKIP_REASON

    from vmss_terminate_sim.emulator.kube import KubeState, start_kube

    if KUBECTL is None:
        pytest.skip(SKIP_REASON)
    (line,) = [raw.strip() for raw in KUBERNETES_DOC.read_text(encoding="utf-8").splitlines()
               if raw.startswith("vmss-terminate render ") and "--kubeconfig kubeconfig" in raw]
    assert "--validate=false" in line
    state = KubeState()
    servers = start_kube(state)  # plain http, as `emulator kube --kubeconfig-out kubeconfig` serves
    try:
        servers.write_kubeconfig(tmp_path / "kubeconfig")
        env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper() and not k.startswith("KUBE")}
        env.update(HOME=str(tmp_path), PATH=str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""))
        done = subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, (line, done.stderr)
        assert "daemonset.apps/vmss-terminate created" in done.stdout
    finally:
        servers.stop()


def test_emulator_kube_help_example_names_a_seed_that_exists() -> None:
    """Issue 28 item 8: the help's `emulator kube --seed cluster.json` named no file of the repo."""
    from vmss_terminate_sim.commands.emulator_kube import kube_command

    help_text = kube_command.help or ""
    seeds = re.findall(r"--seed (\S+)", help_text)
    assert seeds and all((ROOT / seed).is_file() for seed in seeds), seeds
    node = json.loads((ROOT / seeds[0]).read_text(encoding="utf-8"))["nodes"][0]["name"]
    assert f"drain {node} " in help_text


def test_the_docs_say_to_pair_emulator_imds_and_kube_with_node_name() -> None:
    """Issue 28 item 8: the default `emulator imds` VM matches no node of examples/kube-seed.json,
    by providerID or computer name (the agent's two ways to find its node), so pairing them needs
    --node-name; the docs say so."""
    from vmss_terminate_sim.commands.emulator_imds import DEFAULT_VM_NAME
    from vmss_terminate_sim.emulator.imds.instance import (
        DEFAULT_RESOURCE_GROUP,
        DEFAULT_SUBSCRIPTION,
        default_resource_id,
        scale_set_of,
    )

    vm_id = default_resource_id(DEFAULT_VM_NAME, scale_set_of(DEFAULT_VM_NAME), DEFAULT_SUBSCRIPTION,
                                DEFAULT_RESOURCE_GROUP).lower()
    nodes = json.loads((ROOT / "examples" / "kube-seed.json").read_text(encoding="utf-8"))["nodes"]
    assert all(n["name"] != DEFAULT_VM_NAME and vm_id not in str(n.get("providerID", "")).lower() for n in nodes)
    for doc in ("kubernetes.md", "emulators.md"):
        text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
        assert "--node-name vmss000000" in text and "emulator imds" in text, doc
