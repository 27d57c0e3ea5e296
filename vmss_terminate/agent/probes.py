"""`agent run --listen HOST:PORT`: the agent's `AgentMetrics` served by the pipeline's probe listener.

The listener (one selector thread, its connection limits, `--listen` parsing and the loopback
rule) is `vmss_terminate.pipeline.probes`; what is the agent's own is here: the metrics attached
to the agent, and the agent told that `/readyz` is served (its drain log lines then name it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vmss_terminate.agent.metrics import AgentMetrics
from vmss_terminate.pipeline.probes import ProbeServer, parse_listen

if TYPE_CHECKING:
    from vmss_terminate.agent.agent import Agent


def serve(agent: "Agent", listen: str) -> ProbeServer:
    """Start serving `agent`'s metrics and probes on `listen` (see `parse_listen`; port 0 = any free port)."""
    host, port = parse_listen(listen)
    server = ProbeServer(AgentMetrics(agent).attach(), host, port).start()
    agent.readiness_served = True
    return server
