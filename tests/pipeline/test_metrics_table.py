"""One decision -> metric table for the pipeline, whichever source runs it: the central handler's
/metrics counts steps, approvals and the node drain by the table the agent uses
(`pipeline/metrics.py`), under the agent's names, with no VM or node name as a label."""

from __future__ import annotations

from vmss_terminate.central.metrics import CentralMetrics
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.decisions import Decision
from vmss_terminate.pipeline.metrics import TABLE, PipelineMetrics


def _decisions() -> list:
    return [Decision(D.HOOK_STARTED, "E1", "web_1", "", 0.0, {"hook": "hook#1:/bin/x@web_1"}),
            Decision(D.HOOK_FAILED, "E1", "web_1", "", 0.0, {"hook": "hook#1:/bin/x@web_1", "outcome": "lost",
                                                             "duration": 2.0}),
            Decision(D.APPROVAL_SENT, "E1", "web_1", "", 0.0, {"event_type": "Terminate"}),
            Decision(D.KUBE_CORDONED, "E1", "web_1", "", 0.0, {"node": "node-web-1", "by_us": True}),
            Decision(D.KUBE_EVICTED, "E1", "web_1", "", 0.0, {"node": "node-web-1", "pod": "a/b"})]


def test_the_central_handler_counts_the_pipelines_decisions_with_the_agents_table() -> None:
    central, shared = CentralMetrics(), PipelineMetrics()
    for decision in _decisions():
        central.observe("decision", decision=decision)
        shared(decision)
    text = central.text()
    for line in ("vmss_terminate_hooks_run_total 1", 'vmss_terminate_hooks_failed_total{outcome="lost"} 1',
                 'vmss_terminate_approvals_sent_total{event_type="Terminate"} 1',
                 "vmss_terminate_kubernetes_pods_evicted_total 1", "vmss_terminate_hook_duration_seconds_count 1"):
        assert line in text.splitlines()
    assert "node-web-1" not in text and "web_1" not in text  # no node or VM name as a label
    agent_side: list = []
    shared.render(agent_side, kubernetes=True)  # the agent's rendering of the same table names its node
    assert 'vmss_terminate_kubernetes_node_cordoned{node="node-web-1"} 1' in agent_side
    assert set(TABLE) >= {D.HOOK_STARTED, D.HOOK_FINISHED, D.HOOK_FAILED, D.APPROVAL_SENT, D.APPROVAL_FAILED}
