"""No function of either package takes more than ten parameters, click commands aside (a command's
parameters are its options, declared beside it). A longer list is a record waiting to be named:
`ArmState.add_scale_set` takes a `ScaleSetSpec` (or its fields as keywords), `KubeState.add_pod` a
`PodShape`, `ImdsEmulator` the rest of the VM's identity as `make_identity` takes it, `iac.render`
a `RenderOptions`."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Tuple, Union

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 10
PENDING: Dict[str, str] = {
    # issue 25 (central handler), landed while this test was on main: its collaborators (source,
    # lookup, acknowledge, run_command, drain, undo, observe) want one record.
}
Function = Union[ast.FunctionDef, ast.AsyncFunctionDef]


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[Tuple[str, Function]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
            yield from _functions(node, f"{prefix}{node.name}.")


def _count(node: Function) -> int:
    """Parameters a caller may pass: every named one (not `self`/`cls`), `*args` and `**kwargs`."""
    args = node.args
    named = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg not in ("self", "cls")]
    return len(named) + (args.vararg is not None) + (args.kwarg is not None)


def _is_click_command(node: Function) -> bool:
    return any(isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr in ("command", "group")
               for d in node.decorator_list)


def _too_long() -> Dict[str, int]:
    found = {}
    for top in ("vmss_terminate", "vmss_terminate_sim"):
        for path in sorted((ROOT / top).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for name, node in _functions(tree):
                if _count(node) > LIMIT and not _is_click_command(node):
                    found[f"{path.relative_to(ROOT).as_posix()}:{name}"] = _count(node)
    return found


def test_no_function_takes_more_than_ten_parameters() -> None:
    assert {k: v for k, v in _too_long().items() if k not in PENDING} == {}


def test_the_pending_list_is_still_true() -> None:
    """A pending entry that was fixed (or moved) must leave the list, so it cannot hide a new one."""
    too_long = _too_long()
    assert [k for k in PENDING if k not in too_long] == []


def test_the_count_reads_every_kind_of_parameter() -> None:
    """The guard can fail: positional-only, keyword-only, *args and **kwargs count; self and a
    click command's options do not."""
    source = ("class A:\n    def f(self, a, /, b, *c, d, **e): ...\n"
              "@click.command('x')\n@click.option('--a')\ndef cmd(a, b, c, d, e, f, g, h, i, j, k): ...\n")
    found: List[Tuple[str, int, bool]] = [(n, _count(f), _is_click_command(f)) for n, f in _functions(ast.parse(source))]
    assert found == [("A.f", 5, False), ("cmd", 11, True)]
