"""The in-VM agent: poll IMDS Scheduled Events, run drain hooks, approve only this VM's events.

Imports `requests` and the standard library only -- never `azure.*` -- so it starts fast and small
on every scale-set instance.

    from vmss_terminate.agent import Agent, AgentConfig
    agent = Agent(AgentConfig(hooks=["/usr/local/bin/drain"]))
    agent.on("Terminate", lambda event, ctx: deregister(ctx.vm_name))
    agent.subscribe(print)
    agent.run(stop_event)
"""

from vmss_terminate.agent.agent import Agent
from vmss_terminate.agent.config import AgentConfig
from vmss_terminate.agent.imds import DEFAULT_IMDS_URL, ForeignEventError, ImdsClient, ImdsError, check_imds_api_version
from vmss_terminate.pipeline.decisions import Decision
from vmss_terminate.pipeline.events import EVENT_TYPES, Event, EventsDocument, owns, parse_types
from vmss_terminate.pipeline.hooks import HookContext
from vmss_terminate.pipeline.journal import MEMORY, StateStore, default_state_file
from vmss_terminate.scheduled_events import DEFAULT_API_VERSION

__all__ = [
    "Agent", "AgentConfig", "Decision", "Event", "EventsDocument", "EVENT_TYPES", "HookContext",
    "ImdsClient", "ImdsError", "ForeignEventError", "StateStore", "MEMORY", "DEFAULT_API_VERSION",
    "DEFAULT_IMDS_URL", "check_imds_api_version", "default_state_file", "owns", "parse_types",
]
