"""--kill-grace against a leasing source's give_up_before: a hook stopped when a queue lease is
given up is killed kill_grace later and must be dead before the lease can lapse (and another replica
run the event's hook), so kill_grace >= give_up_before is refused -- ValueError from the API, one
line and exit 2 from the CLI, before any request."""

from __future__ import annotations

import os
from typing import Dict, List, Sequence

import pytest
from clifork import run_forked

from vmss_terminate.central.handler import CentralHandler, HandlerConfig
from vmss_terminate.central.source import CentralEvent, ScaleSetRef, SourceBatch
from vmss_terminate.central.storage_queue import QueueSettings
from vmss_terminate.pipeline.hooks import WAKE_EVERY

from .conftest import SUB


class LeasingSource:
    """An EventSource that leases its events to one replica, as the queue's (its QueueSettings)."""

    settings = QueueSettings()

    def poll(self) -> SourceBatch:
        return SourceBatch()

    def settle(self, event: CentralEvent) -> None:
        pass

    def close(self) -> None:
        pass


def _handler(kill_grace: float) -> CentralHandler:
    def lookup(refs: Sequence[ScaleSetRef]) -> Dict[str, object]:
        return {}

    def acknowledge(ref: ScaleSetRef, ids: Sequence[str]) -> List[object]:
        raise AssertionError("nothing is acknowledged here")

    return CentralHandler(LeasingSource(), lookup, acknowledge, HandlerConfig(kill_grace=kill_grace))  # type: ignore[arg-type]


def test_the_api_refuses_a_kill_grace_the_lease_would_not_wait_for() -> None:
    give_up = QueueSettings().give_up_before
    with pytest.raises(ValueError, match="must be shorter than the queue source's give_up_before"):
        _handler(give_up)
    with pytest.raises(ValueError):
        _handler(give_up + 1)
    with pytest.raises(ValueError):  # a running step notices the loss up to WAKE_EVERY late
        _handler(give_up - WAKE_EVERY)
    assert _handler(give_up - WAKE_EVERY - 0.5).config.kill_grace == give_up - WAKE_EVERY - 0.5


def test_the_cli_refuses_it_with_one_line_and_exit_2() -> None:
    result = run_forked(["central", "run", "--subscription", SUB, "--source", "queue", "--queue-url",
                         "https://acct.queue.core.windows.net/events", "--kill-grace", "6.5"],
                        os.environ, os.getcwd(), timeout=60)
    assert result.returncode == 2, result.stderr
    assert "--kill-grace 6.5 must be shorter" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""
