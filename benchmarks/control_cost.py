"""Control plane cost: what `enable` sends to ARM for a large Manual scale set, and how long it takes.

Runs `vmss_terminate.control.enable` (the library behind `vmss-terminate enable`) through the real
azure-mgmt-compute client and DefaultAzureCredential against the local ARM emulator, with a fixed
latency added to every request (ARM and token endpoint) to stand in for a real round trip.

    python benchmarks/control_cost.py [--instances 1000] [--latency 0.05] [--batch-size auto]
                                      [--retry-after 1] [--max-batch-percent 20]

`--retry-after S` sends Retry-After on operation answers (what `emulator arm --lro-retry-after`
sets); `--max-batch-percent P` gives the set `rollingUpgradePolicy.maxBatchInstancePercent` (what
`--batch-size auto` follows). Printed too: the client's own time per operation -- the wall time
less the round trips (requests x latency: every request of `enable` waits for the one before) and
less the Retry-After waits the operations asked for, divided by the operations (PATCH + POSTs).

Expected writes: exactly 1 PATCH + ceil(stale / batch) manualupgrade POSTs; everything else is reads
(scale set GETs, VM list pages, LRO status polls). Exits 1 if the write count is different.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import Counter

from vmss_terminate.control import BatchSize, Connection, UpgradeOptions, enable
from vmss_terminate_sim.emulator.arm.app import ArmState, start_arm

SUB = "00000000-0000-0000-0000-00000000be0c"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds added to every request")
    parser.add_argument("--batch-size", default="auto")
    parser.add_argument("--retry-after", type=int, default=None, help="Retry-After on operation answers (s)")
    parser.add_argument("--max-batch-percent", type=int, default=None,
                        help="the set's rollingUpgradePolicy.maxBatchInstancePercent")
    args = parser.parse_args()

    batch = BatchSize.parse(args.batch_size)
    state = ArmState()
    record = state.add_scale_set(SUB, "bench", "big", capacity=args.instances, upgrade_policy="Manual")
    if args.max_batch_percent is not None:
        record.upgrade_policy_extra = {"rollingUpgradePolicy": {"maxBatchInstancePercent": args.max_batch_percent}}
    with start_arm(state, latency=args.latency, lro_retry_after=args.retry_after) as servers:
        os.environ.update(servers.env)
        connection = Connection(subscription_id=SUB, arm_endpoint=servers.arm_url)
        started = time.perf_counter()
        result = enable("bench", "big", "PT10M", connection=connection, options=UpgradeOptions(batch_size=batch))
        wall = time.perf_counter() - started
        log = servers.arm_server.log.all()
        tokens = len(servers.token_server.log.all())

    per_batch = batch.for_total(args.instances, args.max_batch_percent)
    expected_posts = math.ceil(args.instances / per_batch)
    kinds: Counter[str] = Counter()
    for request in log:
        if request.method == "PATCH":
            kinds["PATCH scale set"] += 1
        elif request.method == "POST" and request.path.endswith("/manualupgrade"):
            kinds["POST manualupgrade"] += 1
        elif request.method == "GET" and "/operations/" in request.path:
            kinds["GET LRO status"] += 1
        elif request.method == "GET" and request.path.endswith("/virtualMachines"):
            kinds["GET VM list page"] += 1
        elif request.method == "GET":
            kinds["GET scale set"] += 1
        else:
            kinds[f"{request.method} other"] += 1

    assert result.upgrade is not None
    print(f"enable on a {args.instances}-instance Manual scale set, {args.latency * 1000:.0f} ms added per request, "
          f"batch size {batch} (= {per_batch} instances)")
    for kind in sorted(kinds):
        print(f"  {kind:<20} {kinds[kind]:>5}")
    print(f"  {'token requests':<20} {tokens:>5}")
    print(f"  {'ARM requests total':<20} {len(log):>5}")
    print(f"writes: {kinds['PATCH scale set']} PATCH + {kinds['POST manualupgrade']} manualupgrade POSTs "
          f"(expected 1 + ceil({args.instances}/{per_batch}) = {1 + expected_posts})")
    print(f"upgraded {len(result.upgrade.upgraded)} instances in {result.upgrade.batches_done} batches")
    print(f"wall time: {wall:.2f} s")
    operations = kinds["PATCH scale set"] + kinds["POST manualupgrade"]
    waits = (kinds["GET LRO status"] - operations) * (args.retry_after or 0)  # one wait per InProgress answer
    own = wall - (len(log) + tokens) * args.latency - waits
    print(f"client's own time: {own:.2f} s = wall {wall:.2f} - {len(log) + tokens} round trips x {args.latency:g} s "
          f"- {waits} s of Retry-After = {own / max(1, operations):.3f} s per operation ({operations} operations)")
    ok = kinds["PATCH scale set"] == 1 and kinds["POST manualupgrade"] == expected_posts and not kinds.get("PUT other")
    return 0 if ok and len(result.upgrade.upgraded) == args.instances else 1


if __name__ == "__main__":
    sys.exit(main())
