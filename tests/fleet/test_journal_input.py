"""A rollout journal that is not what this tool writes is bad input: not valid UTF-8, not JSON, not
an object or nested absurdly -> exit 2, one line naming the file and the line. A torn last line (a
write cut short: no newline after it) is still ignored, so a crashed run resumes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vmss_terminate.errors import UsageError
from vmss_terminate.fleet.journal import Journal

from .conftest import run

HEADER = json.dumps({"event": "rollout", "timeout": "PT10M", "batch_size": "20%"}).encode() + b"\n"
SET = json.dumps({"event": "set", "id": "/subscriptions/x/rg/a", "status": "done"}).encode() + b"\n"


@pytest.mark.parametrize("line, problem", [
    (b"\xff\xfe{}\n", "line 3 is not valid UTF-8"),
    (b"{not json\n", "line 3 is not JSON"),
    (b"[1, 2]\n", "line 3 is a JSON list where a JSON object was expected"),
    (b"\"done\"\n", "line 3 is a JSON string where a JSON object was expected"),
    (b"[" * 100_000 + b"]" * 100_000 + b"\n", "line 3 is nested too deeply"),
    (b'{"a": ' * 20 + b"1" + b"}" * 20 + b"\n", "line 3 is nested more than 8 levels deep"),
], ids=["utf-8", "json", "list", "string", "recursion", "depth"])
def test_a_journal_line_that_is_not_ours_is_bad_input(tmp_path: Path, line: bytes, problem: str) -> None:
    path = tmp_path / "rollout.journal"
    path.write_bytes(HEADER + SET + line + SET)
    with pytest.raises(UsageError) as caught:
        Journal(path, "PT10M", "20%")
    message = str(caught.value)
    assert message.startswith(f"journal {path} {problem}: ") and "\n" not in message
    assert "Error" not in message  # Azure's/JSON's words, never a Python exception name


def test_the_cli_says_it_in_one_line_with_exit_2(arm: object, tmp_path: Path) -> None:
    path = tmp_path / "rollout.journal"
    path.write_bytes(HEADER + b"\xc3\x28\n")
    result = run("fleet", "rollout", "--timeout", "10m", "--journal", str(path))
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (f"error: journal {path} line 2 is not valid UTF-8: not a journal this tool wrote "
                                     "(pass another --journal file, or repair that line)")


@pytest.mark.parametrize("torn", [b'{"event": "set", "id": "/subscriptions/x/rg/b", "sta', b"\xe2\x82"],
                         ids=["json", "utf-8"])
def test_a_torn_last_line_is_still_ignored(tmp_path: Path, torn: bytes) -> None:
    path = tmp_path / "rollout.journal"
    path.write_bytes(HEADER + SET + torn)
    journal = Journal(path, "PT10M", "20%", read_only=True)
    assert journal.done() == {"/subscriptions/x/rg/a"}
