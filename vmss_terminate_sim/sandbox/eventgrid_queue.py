"""`sandbox --central --source queue`: the sandbox's scale set publishes its scheduled events, and
Event Grid (played by the ARM emulator, `emulator/arm/eventgrid.py`) delivers each change to a queue
of a real Azurite started here -- what `central run --source queue` reads.

Azurite must be installed (`python -m vmss_terminate_sim.azurite install`, into a cache, no global
install); when it is not, `start_queue` raises OSError naming that command.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict

from vmss_terminate_sim import azurite
from vmss_terminate_sim.emulator.arm.eventgrid import EventGridDelivery
from vmss_terminate_sim.emulator.storagequeue import StorageQueueWriter

QUEUE = "scheduled-events"
CONNECTION_STRING_ENV = "VMSS_TERMINATE_QUEUE_CONNECTION_STRING"


@dataclass
class SandboxQueue:
    """Azurite, its queue, and the delivery feeding it; `stop()` ends them."""

    server: azurite.Azurite
    delivery: EventGridDelivery
    queue: str

    @property
    def url(self) -> str:
        return f"{self.server.endpoints.queue}/{self.queue}"

    @property
    def connection_string(self) -> str:
        return self.server.endpoints.connection_string

    def env(self) -> Dict[str, str]:
        """The variable `central run --queue-connection-string-env` names (Azurite's public dev account)."""
        return {CONNECTION_STRING_ENV: self.connection_string}

    def stop(self) -> None:
        self.delivery.close()
        self.server.stop()


def start_queue(box: Any, *, duplicate_rate: float = 0.0) -> SandboxQueue:
    """Start Azurite, create the queue and deliver every published event change of `box` to it."""
    server = azurite.start()
    try:
        writer = StorageQueueWriter(server.endpoints.connection_string, QUEUE)
        writer.create_queue()
        delivery = EventGridDelivery(writer, duplicate_rate=duplicate_rate).attach(box.state.maintenance)
    except BaseException:
        server.stop()
        raise
    return SandboxQueue(server, delivery, QUEUE)
