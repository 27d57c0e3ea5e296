"""Fleet cost: `fleet audit` and `fleet rollout` on a generated estate, against the local ARM emulator
with a fixed latency on every request and a per-subscription write quota.

    python benchmarks/fleet.py [--sets 200] [--subscriptions 5] [--instances 20] [--latency 0.05]
                               [--write-quota writes=40/10] [--concurrency 32] [--serial-sample 10]

Runs the library (`vmss_terminate.fleet.audit` / `rollout`, i.e. what the CLI runs) through the real
azure-mgmt-resourcegraph and azure-mgmt-compute clients with DefaultAzureCredential. The estate is
`--generate SETS/SUBS xINSTANCES` (emulator/arm/fleetgen.py: a fifth of the sets never configured, a
fifth disabled, a fifth current, a fifth PT5M, a fifth with stale instances; 1 in 20 Spot and 1 in 20
AKS-managed per subscription, which the rollout skips).

Reports: audit wall time and requests; rollout wall time against the ideal -- the critical path the
quota and concurrency allow, from the requests the rollout actually needed: max(the longest single
set's chain of requests x latency, all requests x latency / concurrency, per subscription
(writes - bucket) / refill rate) -- and against a serial loop of `enable` (the shell loop the issue
started from), timed on a sample of sets and scaled to all of them. Exits 1 when a target is missed:
audit <= 3 s, rollout <= 1.3 x ideal, every 429 retried, no set failed.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from multiprocessing.connection import Connection as Pipe
from typing import Any, Dict, List, Tuple

from vmss_terminate.control import Connection, UpgradeOptions, enable
from vmss_terminate.control.connection import LOOPBACK_POLL_SECONDS
from vmss_terminate.control.upgrade import BatchSize
from vmss_terminate.emulator.arm.app import ArmState, start_arm
from vmss_terminate.emulator.arm.quota import parse_spec
from vmss_terminate.fleet import audit
from vmss_terminate.fleet.rollout import rollout

WRITES = ("PATCH", "PUT", "POST", "DELETE")


def _estate(args: argparse.Namespace) -> ArmState:
    state = ArmState()
    state.load_seed({"generate": {"scaleSets": args.sets, "subscriptions": args.subscriptions,
                                  "capacity": args.instances}})
    state.quotas.configure([parse_spec(args.write_quota)])
    return state


@dataclass
class Seen:
    """One request the emulator answered (what the child process reports)."""

    method: str
    path: str
    status: int
    monitor: bool  # a Location-URL read (`monitor=true`): the SDK's final LRO GET, sent without a wait


def _serve(args: argparse.Namespace, pipe: Pipe) -> None:
    """The emulator in its own process (ARM is not in the client's process either: no GIL shared)."""
    servers = start_arm(_estate(args), latency=args.latency)  # what `emulator arm --latency MS` sets
    pipe.send((servers.arm_url, servers.env))
    while True:
        command = pipe.recv()
        if command == "log":
            pipe.send([(r.method, r.path, r.status, r.query.get("monitor") == ["true"])
                       for r in servers.arm_server.log.all()])
        elif command == "clear":
            servers.arm_server.log.clear()
            pipe.send(None)
        elif command == "reset":
            servers.reset(_estate(args))
            pipe.send(None)
        else:
            servers.stop()
            pipe.send(None)
            return


class Emulator:
    def __init__(self, args: argparse.Namespace) -> None:
        self.pipe, child = multiprocessing.Pipe()
        self.process = multiprocessing.get_context("fork").Process(target=_serve, args=(args, child), daemon=True)
        self.process.start()
        self.url, self.env = self.pipe.recv()

    def ask(self, command: str) -> Any:
        self.pipe.send(command)
        return self.pipe.recv()

    def log(self) -> List[Seen]:
        return [Seen(*item) for item in self.ask("log")]

    def stop(self) -> None:
        self.ask("stop")
        self.process.join(10)


def _kind(request: Seen) -> str:
    if "resourcegraph" in request.path.lower():
        return "Resource Graph page"
    if request.path.rstrip("/").endswith("/subscriptions"):
        return "GET /subscriptions"
    if request.status == 429:
        return "429 answers"
    if request.method == "PATCH":
        return "PATCH scale set"
    if request.method == "POST" and request.path.endswith("/manualupgrade"):
        return "POST manualupgrade"
    if "/operations/" in request.path:
        return "GET LRO status"
    if request.path.endswith("/virtualMachines"):
        return "GET VM list page"
    if request.method == "GET":
        return "GET scale set"
    return f"{request.method} other"


def _set_of(request: Seen) -> str:
    marker = "/virtualMachineScaleSets/"
    if marker not in request.path:
        return ""
    return request.path.split(marker)[1].split("/")[0]


def _ideal(log: List[Seen], latency: float, poll_wait: float, concurrency: int, bucket: int,
           refill: float) -> Dict[str, float]:
    """The critical path of the write phase from the requests it made: a set's requests are serial,
    so (its requests + its share of LRO polls) x latency is its floor; all requests x latency spread
    over `concurrency` workers; and the writes beyond the bucket at the refill rate."""
    per_set: Counter[str] = Counter()
    writes_per_sub: Counter[str] = Counter()
    for request in log:
        if request.status == 429:
            continue
        name = _set_of(request)
        if name:
            per_set[name] += 1
        if request.method in WRITES and request.path.startswith("/subscriptions/"):
            writes_per_sub[request.path.split("/")[2]] += 1
    polls = sum(1 for r in log if "/operations/" in r.path and r.status != 429)
    waited = sum(1 for r in log if "/operations/" in r.path and r.status != 429 and not r.monitor)
    total = sum(per_set.values()) + polls
    lros = sum(1 for r in log if r.method in ("PATCH", "POST") and r.status != 429) or 1
    # LRO status polls carry no set name: attribute them evenly per LRO; each status poll follows
    # the SDK's poll interval (what an LRO takes on this server), the final Location GET does not
    per_lro, waits_per_lro = polls / lros, waited / lros
    chain = max((n * latency + _lros_of(log, name) * (per_lro * latency + waits_per_lro * poll_wait)
                 for name, n in per_set.items()), default=0.0)
    spread = (total * latency + waited * poll_wait) / concurrency
    quota = max(((w - bucket) / refill for w in writes_per_sub.values()), default=0.0)
    return {"chain": chain, "concurrency": spread, "quota": max(0.0, quota),
            "ideal": max(chain, spread, quota)}


def _lros_of(log: List[Seen], name: str) -> int:
    return sum(1 for r in log if r.method in ("PATCH", "POST") and r.status != 429 and _set_of(r) == name)


def _timed(call: Any) -> Tuple[Any, float]:
    started, cpu = time.perf_counter(), time.process_time()
    result = call()
    wall = time.perf_counter() - started
    print(f"  [client CPU {time.process_time() - cpu:.2f} s of {wall:.2f} s wall]")
    return result, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", type=int, default=200)
    parser.add_argument("--subscriptions", type=int, default=5)
    parser.add_argument("--instances", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds added to every request")
    parser.add_argument("--write-quota", default="writes=40/10", help="per subscription: writes=BUCKET/PERSECOND")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--batch-size", default="20%")
    parser.add_argument("--serial-sample", type=int, default=10, help="sets timed with a serial enable loop")
    args = parser.parse_args()
    limit = parse_spec(args.write_quota)
    ok = True

    emulator = Emulator(args)
    try:
        os.environ.update(emulator.env)
        connection = Connection(arm_endpoint=emulator.url)
        report, audit_wall = _timed(lambda: audit(timeout=10, connection=connection, concurrency=args.concurrency))
        audit_log = emulator.log()
        kinds = Counter(_kind(r) for r in audit_log)
        print(f"estate: {args.sets} scale sets x {args.instances} instances, {args.subscriptions} subscriptions, "
              f"{args.latency * 1000:.0f} ms per request, write quota {args.write_quota} per subscription, "
              f"concurrency {args.concurrency}")
        print(f"\naudit: {audit_wall:.2f} s, {len(audit_log)} ARM requests "
              f"({', '.join(f'{k}: {v}' for k, v in sorted(kinds.items()))}), "
              f"{len(report.non_compliant)} of {len(report.scale_sets)} non-compliant")
        enabled_uniform = sum(1 for r in report.scale_sets if r.enabled and r.uniform)
        pages = math.ceil(len(report.scale_sets) / 1000)
        expected = 1 + pages + enabled_uniform
        print(f"  expected: 1 subscription list + {pages} Resource Graph page(s) + {enabled_uniform} instance lists "
              f"= {expected}")
        if audit_wall > 3.0 or len(audit_log) != expected:
            print("  MISSED: audit <= 3 s with the expected requests")
            ok = False

        emulator.ask("clear")
        result, wall = _timed(lambda: rollout(timeout=10, connection=connection, concurrency=args.concurrency,
                                              batch_size=args.batch_size))
        log = emulator.log()
        write_log = [r for r in log if "resourcegraph" not in r.path.lower()
                     and not r.path.rstrip("/").endswith("/subscriptions")]
        kinds = Counter(_kind(r) for r in log)
        throttled = sum(1 for r in log if r.status == 429)
        ideal = _ideal(write_log, args.latency, LOOPBACK_POLL_SECONDS, args.concurrency, limit.bucket,
                       limit.refill_per_second)
        summary = result.to_dict()
        print(f"\nrollout: {wall:.2f} s, {len(log)} ARM requests "
              f"({', '.join(f'{k}: {v}' for k, v in sorted(kinds.items()))})")
        print(f"  sets: {summary['sets']}, instances upgraded: {summary['instances_upgraded']}")
        print(f"  429s: {throttled} answered, {result.throttling['retried']} retried, "
              f"{result.throttling['gave_up']} given up; failed sets: {len(result.failed)}")
        print(f"  ideal write phase: {ideal['ideal']:.2f} s = max(longest set chain {ideal['chain']:.2f} s, "
              f"(requests x latency + LRO polls x poll interval) / concurrency {ideal['concurrency']:.2f} s, "
              f"write quota {ideal['quota']:.2f} s); "
              f"+ its own audit ({result.audit_seconds:.2f} s) = {ideal['ideal'] + result.audit_seconds:.2f} s")
        ratio = wall / (ideal["ideal"] + result.audit_seconds)
        print(f"  rollout / ideal = {ratio:.2f}")
        if ratio > 1.3 or throttled != result.throttling["retried"] or result.failed or not result.ok:
            print("  MISSED: rollout <= 1.3 x ideal, every 429 retried, none failed")
            ok = False

        # the serial loop the issue started from: enable one set after the other (fresh estate)
        emulator.ask("reset")
        plan_sets = [o.planned.record for o in result.outcomes if o.planned.works]
        sample = plan_sets[:args.serial_sample]
        options = UpgradeOptions(batch_size=BatchSize.parse(args.batch_size))

        def serial_loop() -> None:
            for record in sample:
                enable(record.resource_group, record.name, 10, options=options,
                       connection=Connection(subscription_id=record.subscription_id, arm_endpoint=emulator.url))

        _, sample_wall = _timed(serial_loop)
        serial = sample_wall / max(1, len(sample)) * len(plan_sets)
        print(f"\nserial enable loop: {len(sample)} sets in {sample_wall:.1f} s -> {serial:.0f} s for all "
              f"{len(plan_sets)} (the rollout is x{serial / wall:.1f} faster)")
    finally:
        emulator.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
