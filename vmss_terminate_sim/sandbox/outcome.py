"""What the demo concludes about its agents' story, from one set of facts.

The verdict (the first problem, or none), the totals and the summary lines all count the same
`RemovedVm` records, so they cannot disagree: a VM approved with its node not drained is a problem
(the demo fails), is counted in `approved_without_draining`, and the Kubernetes line says so.
`Outcome.read` takes plain records (the scheduler's `Deletion`s, the timeline's entries, the IMDS
approvals), so a test can state a story without running one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.kubernetes.drain import DRAIN_STEP
from vmss_terminate_sim.emulator.imds.events import Approval
from vmss_terminate_sim.sandbox.scheduler import Deletion
from vmss_terminate_sim.sandbox.timeline import Entry, hook_of


@dataclass(frozen=True)
class NodeFacts:
    """`--kubernetes`: what the agent's timeline says about the VM's node."""

    drained: bool  # a kube_drained entry: every evicted pod left
    failure: str  # why not, as the agent said it ("" when drained)
    approved_first: bool  # the approval came before kube_drained


@dataclass(frozen=True)
class RemovedVm:
    """One removed instance: how it went (the scheduler) and what its agent did (the timeline)."""

    vm: str
    event_id: Optional[str]
    approved_by: Optional[str]
    start_reason: str
    timeout_s: Optional[float]
    hooks_finished: int  # the drain hooks (the node drain is `node`)
    hook_failure: str  # the first failed drain hook's message, "" if none failed
    node: Optional[NodeFacts]  # None without --kubernetes

    @property
    def own_approval(self) -> bool:
        """Deleted because its own agent approved its event (not at NotBefore, not by another VM)."""
        return self.approved_by == self.vm and self.start_reason.startswith("approved")

    @property
    def drained(self) -> bool:
        """Every drain hook finished, none failed, and (with --kubernetes) the node was drained first."""
        hooks_ok = self.hooks_finished > 0 and not self.hook_failure
        return hooks_ok and (self.node is None or (self.node.drained and not self.node.approved_first))

    def problem(self, speed: float) -> Optional[str]:
        """Why this instance did not go gracefully, or None."""
        vm = self.vm
        if self.event_id is None:
            return f"{vm} got no Terminate event (its model has no notification)"
        if self.approved_by != vm:
            hint = ""
            if self.start_reason.startswith("NotBefore passed") and self.timeout_s is not None:
                hint = ("; its NotBefore passed before its agent drained and approved it: lower --speed "
                        f"(x{speed:g} runs the timeout in {self.timeout_s / speed:.2f} real s)")
            return f"{vm} was not approved by its own agent ({self.start_reason}){hint}"
        if not self.start_reason.startswith("approved"):
            return f"{vm} was deleted without a completed approval ({self.start_reason})"
        if self.hook_failure:
            return (f"{vm}'s drain hook failed ({self.hook_failure}); its agent approved anyway "
                    f"(on_hook_failure=approve), so the instance went without draining")
        if self.hooks_finished == 0:
            return f"{vm}'s drain hook did not finish before its deletion"
        if self.node is not None and not self.node.drained:
            why = f" ({self.node.failure})" if self.node.failure else ""
            return (f"{vm}'s node was not drained before its approval{why}; its agent approved anyway "
                    f"(on_hook_failure=approve), so the instance went without draining")
        if self.node is not None and self.node.approved_first:
            return f"{vm} was approved before its node was drained"
        return None


@dataclass(frozen=True)
class Outcome:
    """The agents' story as the demo judges and counts it (see the module docstring)."""

    removed: List[RemovedVm]
    foreign: List[Approval]  # approvals of events that did not list the approving VM
    by_stayers: List[Approval]  # approvals by instances that were not being deleted
    kubernetes: bool
    budget_held: bool  # --kubernetes: a PodDisruptionBudget refused an eviction at least once

    @classmethod
    def read(cls, deletions: Sequence[Deletion], entries: Sequence[Entry], approvals: Sequence[Approval],
             stayed: Sequence[str], kubernetes: bool) -> "Outcome":
        agent = [e for e in entries if e.source == "agent"]
        removed = [_removed_vm(d, [e for e in agent if e.vm == d.vm_name], kubernetes) for d in deletions]
        return cls(removed=removed, foreign=[a for a in approvals if a.foreign],
                   by_stayers=[a for a in approvals if a.vm_name in set(stayed)], kubernetes=kubernetes,
                   budget_held=any(e.kind == D.KUBE_EVICTION_REFUSED for e in agent))

    def problems(self, speed: float) -> List[str]:
        """Everything that was not graceful, worst first; the first one is the demo's failure."""
        found: List[str] = []
        if self.foreign:
            found.append("an agent approved an event that was not its own: " + ", ".join(
                f"{a.vm_name} approved {a.event_id}" for a in self.foreign))
        found += [p for p in (vm.problem(speed) for vm in self.removed) if p is not None]
        if self.by_stayers:
            found.append(f"{self.by_stayers[0].vm_name} approved an event although it was not being deleted")
        if self.kubernetes and self.removed and not self.budget_held:
            found.append("no eviction was held back by the PodDisruptionBudget")
        return found

    def totals(self) -> Dict[str, Any]:
        own = [vm for vm in self.removed if vm.own_approval]
        counts: Dict[str, Any] = {
            "drained_and_approved": sum(1 for vm in own if vm.drained),
            "approved_without_draining": sum(1 for vm in own if not vm.drained),
            "hooks_finished": sum(vm.hooks_finished for vm in self.removed),
            "hooks_failed": sum(1 for vm in self.removed if vm.hook_failure),
        }
        if self.kubernetes:
            nodes = [vm.node for vm in self.removed if vm.node is not None]
            counts["nodes_drained"] = sum(1 for node in nodes if node.drained)
            counts["nodes_not_drained"] = sum(1 for node in nodes if not node.drained)
            counts["approved_before_node_drained"] = sum(
                1 for vm in own if vm.node is not None and (vm.node.approved_first or not vm.node.drained))
        return counts


def _removed_vm(deletion: Deletion, mine: List[Entry], kubernetes: bool) -> RemovedVm:
    """`mine`: the agent's entries about this VM, in timeline order."""
    hooks = [e for e in mine if e.kind in (D.HOOK_FINISHED, D.HOOK_FAILED) and hook_of(e) != DRAIN_STEP]
    failed = next((e.message for e in hooks if e.kind == D.HOOK_FAILED), "")
    return RemovedVm(vm=deletion.vm_name, event_id=deletion.event_id, approved_by=deletion.approved_by,
                     start_reason=deletion.start_reason, timeout_s=deletion.timeout_s,
                     hooks_finished=sum(1 for e in hooks if e.kind == D.HOOK_FINISHED), hook_failure=failed,
                     node=_node_facts(mine) if kubernetes else None)


def _node_facts(mine: List[Entry]) -> NodeFacts:
    kinds = [e.kind for e in mine]
    drained = D.KUBE_DRAINED in kinds
    approved_first = drained and D.APPROVAL_SENT in kinds and kinds.index(D.APPROVAL_SENT) < kinds.index(
        D.KUBE_DRAINED)
    failure = ""
    if not drained:
        said = [e for e in mine if e.kind in (D.KUBE_NOT_DRAINED, D.KUBE_NODE_NOT_FOUND)
                or (e.kind == D.HOOK_FAILED and hook_of(e) == DRAIN_STEP)]
        failure = said[0].message if said else "no drain of its node was seen"
    return NodeFacts(drained=drained, failure=failure, approved_first=approved_first)


def failure_of(problems: Sequence[str]) -> Optional[str]:
    """The demo's one-line verdict: the first problem, saying how many more the JSON lists; None when
    there is none (then, and only then, the demo exits 0)."""
    if not problems:
        return None
    more = len(problems) - 1
    return problems[0] + (f"; {more} more problem(s): -o json lists them" if more else "")
