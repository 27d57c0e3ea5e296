"""Every option of `agent run`, `fleet audit`, `fleet rollout`, the upgrade options of `enable`,
`disable`, `retime`, `upgrade` and `plan` and the scheduled-events policy options of `enable`,
`disable` and `fleet rollout` has one source: the field that declares it (`AgentConfig`,
`RunOptions`, `AuditOptions`, `RolloutOptions`, `UpgradeOptions`, `PolicyChange`). The click command,
the click-free parser, the Python defaults and docs/cli-reference.md all agree with it, and no
module declares one of these flags a second time."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

import click
import pytest
from clifork import run_forked

from vmss_terminate.agent.command import RUN_OPTIONS, RunOptions, build, parse_args
from vmss_terminate.agent.config import AgentConfig
from vmss_terminate.commands.agent import run_command
from vmss_terminate.commands.control import (
    PLAN_OPTIONS,
    UPGRADE_OPTIONS,
    disable_command,
    enable_command,
    plan_command,
    retime_command,
    upgrade_command,
)
from vmss_terminate.commands.fleet import audit_command, rollout_command
from vmss_terminate.control import BatchSize, UpgradeOptions
from vmss_terminate.control.events_policy import PolicyChange
from vmss_terminate.fleet.options import AuditOptions, RolloutOptions
from vmss_terminate.params import Option, option, options_of
from vmss_terminate.pipeline.kubernetes.rules import DEFAULT_TAINT

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "cli-reference.md").read_text(encoding="utf-8")
COMMANDS: List[Tuple[str, click.Command, Tuple[Option, ...]]] = [
    ("vmss-terminate agent run", run_command, RUN_OPTIONS),
    ("vmss-terminate fleet audit", audit_command, options_of(AuditOptions)),
    ("vmss-terminate fleet rollout", rollout_command, options_of(RolloutOptions)),
    ("vmss-terminate enable", enable_command, options_of(UpgradeOptions)),
    ("vmss-terminate disable", disable_command, options_of(UpgradeOptions)),
    ("vmss-terminate retime", retime_command, options_of(UpgradeOptions)),
    ("vmss-terminate upgrade", upgrade_command, UPGRADE_OPTIONS),
    ("vmss-terminate plan", plan_command, PLAN_OPTIONS),
    ("vmss-terminate enable", enable_command, options_of(PolicyChange)),
    ("vmss-terminate disable", disable_command, options_of(PolicyChange)),
    ("vmss-terminate fleet rollout", rollout_command, options_of(PolicyChange)),
]
SOURCES = {  # the modules that hold a command of COMMANDS (or its click-free parser)
    "agent/command.py": [RUN_OPTIONS], "commands/agent.py": [RUN_OPTIONS],
    "commands/fleet.py": [options_of(AuditOptions), options_of(RolloutOptions), options_of(PolicyChange)],
    "commands/control.py": [options_of(UpgradeOptions), options_of(PolicyChange)],
}
IDS = [c[0] + (" policy" if c[2] == options_of(PolicyChange) else "") for c in COMMANDS]


def _params(command: click.Command) -> Dict[str, click.Option]:
    return {p.name: p for p in command.params if isinstance(p, click.Option) and p.name}


def _doc_rows(path: str) -> Dict[str, str]:
    """The option table of `path` in the reference: first flag -> the row's description."""
    section = DOC.split(f"`{path}`\n", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        match = re.match(r"^\| `(-[^` ]+).*?(?<!\\)\| (.*) \|$", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


@pytest.mark.parametrize("path, command, options", COMMANDS, ids=IDS)
def test_the_click_command_is_the_declared_fields(path: str, command: click.Command,
                                                  options: Tuple[Option, ...]) -> None:
    params = _params(command)
    for opt in options:
        param = params[opt.dest]
        assert tuple(param.opts) == opt.flags and param.help == opt.help, opt.dest
        assert param.default == opt.default and param.required == opt.required, opt.dest
        assert bool(param.show_default) == opt.show_default and param.multiple == opt.multiple, opt.dest
        assert param.is_flag == (opt.kind in ("flag", "switch")), opt.dest


@pytest.mark.parametrize("path, command, options", COMMANDS, ids=IDS)
def test_the_reference_shows_each_declared_help_and_default(path: str, command: click.Command,
                                                            options: Tuple[Option, ...]) -> None:
    rows = _doc_rows(path)
    for opt in options:
        row = rows[opt.flags[0]]
        assert row.startswith(opt.help.replace("|", "\\|")), (opt.dest, row)
        shown = f"(default: `{opt.default}`)"
        assert (shown in row) == (opt.show_default and opt.kind != "flag"), (opt.dest, row)


def test_no_option_given_is_the_python_defaults() -> None:
    """The click-free parser, the click command and `AgentConfig()` / `RunOptions()` start alike."""
    values, given = parse_args([])
    config, run_options = build(values)
    assert given == [] and run_options == RunOptions()
    assert config.validated() == AgentConfig().validated()
    with run_command.make_context("run", []) as ctx:
        assert build(ctx.params) == (config, run_options)


def test_the_fleet_commands_build_the_python_defaults() -> None:
    with audit_command.make_context("audit", []) as ctx:
        assert AuditOptions(**{o.dest: ctx.params[o.dest] for o in options_of(AuditOptions)}) == AuditOptions()
    with rollout_command.make_context("rollout", ["--timeout", "10"]) as ctx:
        built = RolloutOptions(**{o.dest: ctx.params[o.dest] for o in options_of(RolloutOptions)})
    assert built == RolloutOptions(timeout=10)


_TARGET = ["-g", "rg", "-n", "vmss"]


@pytest.mark.parametrize("command, argv, skipped", [
    (enable_command, ["--timeout", "10"], ()), (disable_command, [], ()), (retime_command, ["--timeout", "10"], ()),
    (upgrade_command, [], ("upgrade",)), (plan_command, ["--timeout", "10"], ("upgrade", "wait", "wait_timeout",
                                                                            "poll_interval")),
], ids=["enable", "disable", "retime", "upgrade", "plan"])
def test_the_control_commands_build_the_python_defaults(command: click.Command, argv: List[str],
                                                        skipped: Tuple[str, ...]) -> None:
    """No upgrade option given: the command's `options` is `UpgradeOptions()`; the fields a command
    does not offer are not options of it."""
    with command.make_context(command.name, _TARGET + argv) as ctx:
        declared = [o.dest for o in options_of(UpgradeOptions) if o.dest not in skipped]
        assert [d for d in declared if d in ctx.params] == declared
        assert not [d for d in skipped if d in ctx.params]
        assert UpgradeOptions(**{d: ctx.params[d] for d in declared}) == UpgradeOptions()


def test_the_control_commands_fill_every_field() -> None:
    """Each flag reaches its field: `--no-upgrade` is `upgrade=False`, the rest as parsed."""
    argv = _TARGET + ["--timeout", "10", "--no-upgrade", "--batch-size", "3", "--wait", "--wait-timeout", "60",
                      "--poll-interval", "0.5"]
    with enable_command.make_context("enable", argv) as ctx:
        built = UpgradeOptions(**{o.dest: ctx.params[o.dest] for o in options_of(UpgradeOptions)})
    assert built == UpgradeOptions(upgrade=False, batch_size=BatchSize(3, False), wait=True, wait_timeout=60.0,
                                   poll_interval=0.5)


def test_plan_retells_only_the_help_of_its_batch_size() -> None:
    (batch,) = PLAN_OPTIONS
    declared = {o.dest: o for o in options_of(UpgradeOptions)}["batch_size"]
    assert batch != declared and batch._replace(help=declared.help) == declared


@pytest.mark.parametrize("pattern, where", [
    (r"1800\.0", "control/operations.py"),  # UpgradeOptions.wait_timeout = OperationWait.wait_timeout's default
    (r"\b10\.0,\s*parse=number_range\(.poll-interval|poll.interval[^\n]*= 10\.0", "control/upgrade.py"),
    (r"default=.(20%|auto)|BatchSize\((20|0)\b", "control/upgrade.py"),  # auto since issue 29
], ids=["wait-timeout", "poll-interval", "batch-size"])
def test_the_upgrade_defaults_are_written_once(pattern: str, where: str) -> None:
    """The issue's measure: `commands/control.py` restated `UpgradeOptions`' 1800.0, 10.0 and "20%"."""
    package = ROOT / "vmss_terminate"
    hits = [p.relative_to(package).as_posix() for p in package.rglob("*.py")
            if p.name != "helptexts.py"  # generated: the help text click renders, defaults included
            and re.search(pattern, p.read_text(encoding="utf-8"))]
    assert hits == [where]


def test_safety_margin_default_is_written_once() -> None:
    """The issue's own measure: `safety_margin`'s default appeared in three places."""
    package = ROOT / "vmss_terminate"
    hits = [p.relative_to(package).as_posix() for p in package.rglob("*.py")
            if re.search(r"15\.0, None, MAX_NOTICE|safety_margin[^\n]*15\.0", p.read_text(encoding="utf-8"))]
    assert hits == ["agent/config.py"]
    assert AgentConfig().safety_margin == 15.0


def test_no_module_declares_a_generated_flag_by_hand() -> None:
    """A `click.option("--safety-margin", ...)` beside the field would be a second source."""
    package = ROOT / "vmss_terminate"
    found = []
    for module, declared in SOURCES.items():
        text = (package / module).read_text(encoding="utf-8")
        for flag in {flag for options in declared for opt in options for flag in opt.flags}:
            if re.search(r"(click\.option|Option)\(\s*\(?\s*" + re.escape(f'"{flag}"'), text):
                found.append(f"{module}: {flag}")
    assert found == []


def test_a_flag_field_sets_the_opposite_of_its_default() -> None:
    """`--no-rerun-interrupted` fills `rerun_interrupted=False` in both parsers."""
    values, _ = parse_args(["--no-rerun-interrupted"])
    assert build(values)[0].rerun_interrupted is False
    with run_command.make_context("run", ["--no-rerun-interrupted"]) as ctx:
        assert build(ctx.params)[0].rerun_interrupted is False


def test_declaring_an_option_is_one_field() -> None:
    """What agent/config.py's docstring promises: a field with `option()` is an option of both
    parsers, with its flag from the field name, its default and its kind from the default."""

    @dataclasses.dataclass(frozen=True)
    class Example:
        kill_grace: float = option(5.0, help="Seconds between SIGTERM and SIGKILL.", metavar="S")
        plain: int = 3

    (declared,) = options_of(Example)
    assert declared == Option(("--kill-grace",), "kill_grace", "float", 5.0, "Seconds between SIGTERM and SIGKILL.",
                              "S")
    values: Dict[str, Any]
    values, given = parse_args(["--kill-grace", "2.5"], options_of(Example))
    assert values == {"kill_grace": 2.5} and given == ["kill_grace"]


_CLICK = "import sys\nfrom vmss_terminate.cli import main\nmain(sys.argv[1:], prog_name='vmss-terminate')\n"
_LEAN = "import sys\nfrom vmss_terminate.agent.command import main\nsys.exit(main(sys.argv[1:]))\n"


def _agent_run(code: str, argv: List[str]) -> Tuple[int, str]:
    base = ["--imds-url", "http://127.0.0.1:9", "--state-file", ":memory:", "--once"]
    args = [*(["agent", "run"] if code is _CLICK else []), *base, *argv]
    done = run_forked(args, os.environ, str(ROOT), timeout=60, code=code)  # python -c code args, forked warm
    return done.returncode, done.stderr


@pytest.mark.parametrize("argv, message", [
    (["--taint", DEFAULT_TAINT], "error: --taint applies to --kubernetes: add --kubernetes to drain the node"),
    (["--node-name", "n1", f"--taint={DEFAULT_TAINT}"], "error: --node-name and --taint apply to --kubernetes"),
    (["--kubernetes", "--kubeconfig", "DIR"],
     "error: vmss-terminate agent run: invalid --kubeconfig 'DIR': a directory, not a file"),
    (["--kubeconfig", "DIR"], "error: vmss-terminate agent run: invalid --kubeconfig 'DIR': a directory, not a file"),
], ids=["default taint", "two options", "kubeconfig dir", "kubeconfig dir alone"])
def test_the_click_command_and_the_click_free_path_refuse_alike(argv: List[str], message: str,
                                                                 tmp_path: Path) -> None:
    """`--taint` at its default value without `--kubernetes` was accepted silently (the other
    Kubernetes options are exit 2); a directory as `--kubeconfig` was said two ways ("File ... is a
    directory" / "cannot read ...: Is a directory"). Now one line, exit 2, before any request."""
    argv = [str(tmp_path) if a == "DIR" else a for a in argv]
    click_path, lean = _agent_run(_CLICK, argv), _agent_run(_LEAN, argv)
    assert click_path == lean, (click_path, lean)
    code, stderr = lean
    assert code == 2 and stderr.startswith(message.replace("DIR", str(tmp_path))) and stderr.count("\n") == 1, stderr
