"""The action pipeline: what happens to a scheduled event, whichever source reported it.

A source (the in-VM agent's IMDS poll in `vmss_terminate.agent`) finds events and approves them;
this package decides and acts in between, and knows nothing of where an event came from:

- `pipeline.py`: `Pipeline`, the seam: a source hands it events and a `Source` (how to approve,
  how to report), and it decides, runs the steps and approves through the source;
- `events.py`: the event model (`Event`, `EventsDocument`, `EVERY_LISTED_VM`);
- `policy.py`: the pure rules (run hooks, wait, approve), read from `Settings`;
- `jobs.py`: `JobRunner` runs an event's ordered `Step`s under one deadline (NotBefore minus the
  safety margin), each step journalled;
- `hooks.py`, `process.py`: command hooks (no shell, env + stdin), Python handlers, the JSON webhook;
- `notify.py`: chat notices (Slack, Teams); `decisions.py`: `Decision` and the `DecisionBus`;
- `journal.py`: `StateStore`, what survives a restart; `backoff.py`, `logs.py`: small shared helpers;
- `kubernetes/`: cordon, taint and evict a node's pods (PodDisruptionBudgets honoured), and undo.

Standard library, `requests` and the shared root modules only: never `azure.*`, never the agent.
"""

from vmss_terminate.pipeline.decisions import Decision, DecisionBus
from vmss_terminate.pipeline.events import EVENT_TYPES, EVERY_LISTED_VM, Event, EventsDocument, owns, parse_types
from vmss_terminate.pipeline.hooks import HookContext, StepResult
from vmss_terminate.pipeline.jobs import Step
from vmss_terminate.pipeline.journal import MEMORY, StateStore, default_state_file
from vmss_terminate.pipeline.pipeline import Pipeline, Source

__all__ = [
    "Decision", "DecisionBus", "Event", "EventsDocument", "EVENT_TYPES", "EVERY_LISTED_VM", "HookContext", "MEMORY",
    "Pipeline", "Source", "StateStore", "Step", "StepResult", "default_state_file", "owns", "parse_types",
]
