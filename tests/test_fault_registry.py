"""Every fault field is one row of `FAULT_REGISTRY` (name, `Fault` attribute, kind, bounds, help,
which emulator): the parser, the admin route's listing, `--fault`'s help and the answer-fault checks
read that row, so a new fault is one row (and its attribute on `Fault`), not seven places."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict

import pytest

from vmss_terminate_sim.emulator.faults import (
    ARM,
    FAULT_FIELDS,
    FAULT_REGISTRY,
    FAULT_SPEC_HELP,
    Fault,
    FaultField,
    FaultInjector,
    FaultSpecError,
    fault_from_fields,
    fault_json,
    parse_fault_spec,
)

IDS = [spec.name for spec in FAULT_REGISTRY]


def _inside(spec: FaultField) -> Any:
    """A value the field takes (its upper bound for a number, so the bounds are exercised)."""
    return {"int": int(spec.high), "float": spec.high, "flag": True, "text": "/x", "origin": "http://127.0.0.2:8080",
            "times": int(spec.high)}[spec.kind]


def test_every_fault_attribute_is_one_field_of_the_registry() -> None:
    """`Fault`'s attributes (but `body`, which only Python sets) are each filled by one row; the
    names are unique and are the fields the parser accepts."""
    attributes = [f.name for f in dataclasses.fields(Fault) if f.name != "body"]
    assert sorted(spec.attr for spec in FAULT_REGISTRY) == sorted(attributes)
    assert len(set(FAULT_FIELDS)) == len(FAULT_FIELDS) == len(FAULT_REGISTRY)
    assert {spec.kind for spec in FAULT_REGISTRY} <= {"int", "float", "flag", "text", "origin", "times"}


@pytest.mark.parametrize("spec", FAULT_REGISTRY, ids=IDS)
def test_each_field_parses_lists_and_is_documented(spec: FaultField) -> None:
    """A value inside the bounds round-trips through the parser and the admin route's listing, a
    number outside is refused, and `--fault`'s help names the field (under "ARM only" when only the
    ARM emulator acts on it)."""
    fields: Dict[str, Any] = {spec.name: _inside(spec)}
    if not spec.breaks:
        fields["status"] = 503  # a fault needs something to break
    listed = fault_json(fault_from_fields(fields))
    assert set(listed) == set(FAULT_FIELDS)
    expected = {"text": "/X" if spec.name == "method" else "/x"}.get(spec.kind, _inside(spec))
    assert listed[spec.name] == (str(expected) if spec.name == "retry-after" else expected)
    if spec.kind in ("int", "float", "times"):
        with pytest.raises(FaultSpecError, match=f"invalid fault {spec.name} "):
            fault_from_fields({**fields, spec.name: int(spec.high) + 1})
    head, arm_part = FAULT_SPEC_HELP.split("; ARM only: ")
    assert spec.help in (arm_part if spec.only == ARM else head)


@pytest.mark.parametrize("spec", [s for s in FAULT_REGISTRY if s.only == ARM], ids=lambda s: s.name)
def test_only_the_arm_emulator_takes_an_answer_fault(spec: FaultField) -> None:
    fault = fault_from_fields({spec.name: _inside(spec)})
    assert fault.edits_answer
    with pytest.raises(FaultSpecError, match=f"only the ARM emulator acts on answer faults \\({spec.name}\\)"):
        FaultInjector().add(fault)
    assert FaultInjector(answer_faults=True).add(fault) is fault


def test_a_field_that_breaks_nothing_alone_is_not_a_fault() -> None:
    for spec in FAULT_REGISTRY:
        if not spec.breaks:
            with pytest.raises(FaultSpecError, match="a fault needs status, delay, garbage, drip, pad, reset or"):
                fault_from_fields({spec.name: _inside(spec)})
    assert parse_fault_spec("pad=0,delay=0,short-rows=0").short_rows == 0  # zero rows is an answer fault
