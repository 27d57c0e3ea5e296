"""Fleet work: audit and roll out terminate notification across many scale sets and subscriptions.

    from vmss_terminate.fleet import Scope, audit
    report = audit(Scope.build(tags=["env=prod"]), timeout=10)
    for record in report.non_compliant:
        print(record.id, record.findings)

The estate is read through Azure Resource Graph; writes go through the same control-plane code
`vmss-terminate enable` uses (docs/fleet.md).
"""

from vmss_terminate.fleet.audit import AuditReport, audit
from vmss_terminate.fleet.findings import EXPLANATIONS, FINDINGS, SKIPPED_BY_DEFAULT
from vmss_terminate.fleet.options import AuditOptions, RolloutOptions
from vmss_terminate.fleet.records import ScaleSetAudit
from vmss_terminate.fleet.rollout import RolloutProgress, RolloutResult, rollout
from vmss_terminate.fleet.scope import Scope

__all__ = ["EXPLANATIONS", "FINDINGS", "SKIPPED_BY_DEFAULT", "AuditOptions", "AuditReport", "RolloutOptions",
           "RolloutProgress", "RolloutResult", "Scope", "ScaleSetAudit", "audit", "rollout"]
