"""`vmss-terminate central run --source queue`, the real process, on the real Azurite (loopback only).

The ARM emulator (with its token endpoint: the handler's real azure-identity chain) holds one scale set
whose events its Event Grid delivery (`EventGridDelivery`, base64 Event Grid schema, as Event Grid
sends to a queue) puts in an Azurite queue; the handler is `python -m vmss_terminate central run
--source queue --queue-url ... --queue-connection-string-env ...` as a child process, no hook, its
default journal (memory), blob leases in Azurite. Azurite always runs with --disableTelemetry
(`vmss_terminate_sim.azurite`).

1. Latency: the handler running and idle; events added one at a time (the next once the previous was
   acknowledged) at random phases of its poll cycle. Measured: message enqueued (Put Message answered) -> the acknowledge POST received by the ARM
   emulator (loopback: the same as sent), per event.
2. Throughput: the handler started, pinned to one core (`os.sched_setaffinity`; Azurite and the
   emulator on the others) and idle (its first poll answered: start-up excluded); then N events'
   messages are put at once (4 writers). Measured: N / (first message put -> last acknowledgement),
   and the handler process's CPU per event over that window (/proc/PID/stat).

usage: python benchmarks/queue_source.py [--events 50] [--throughput 300] [--poll-interval 0.5]
Needs Azurite installed (python -m vmss_terminate_sim.azurite install).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from typing import Any, Dict, List, Optional

import requests

from vmss_terminate.clock import SYSTEM_CLOCK
from vmss_terminate_sim import azurite
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState, start_arm
from vmss_terminate_sim.emulator.arm.eventgrid import EventGridDelivery
from vmss_terminate_sim.emulator.imds.events import PlacementGroup
from vmss_terminate_sim.emulator.storagequeue import StorageQueueWriter

SUB = "00000000-0000-0000-0000-000000000000"
POLICY = {"scheduledEventsAdditionalPublishingTargets": {"eventGridAndResourceGraph": {"enable": True}}}
QUEUE_VARIABLE = "VMSS_TERMINATE_BENCH_QUEUE"


class TimedWriter(StorageQueueWriter):
    """Records when each event's first message was enqueued (Put Message answered; wall clock, as
    the ARM emulator stamps acknowledgements)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.enqueued: Dict[str, float] = {}

    def put(self, text: str) -> None:
        super().put(text)
        event = json.loads(base64.b64decode(text))
        self.enqueued.setdefault(event["data"]["resourceInfo"]["properties"]["EventId"].lower(), time.time())


class Handler:
    """`vmss-terminate central run --source queue` as a child process, with /readyz to wait on."""

    def __init__(self, arm: ArmServers, endpoints: azurite.Endpoints, queue: str, poll_interval: float) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper()}
        env.update(arm.env)
        env.update({"VMSS_TERMINATE_ARM_ENDPOINT": arm.arm_url, QUEUE_VARIABLE: endpoints.connection_string})
        self.process = subprocess.Popen(
            [sys.executable, "-m", "vmss_terminate", "central", "run", "--subscription", SUB, "--source", "queue",
             "--queue-url", f"{endpoints.queue}/{queue}", "--queue-connection-string-env", QUEUE_VARIABLE,
             "--poll-interval", str(poll_interval), "--listen", f"127.0.0.1:{self.port}"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def wait_ready(self, seconds: float = 120) -> None:
        http = requests.Session()
        http.trust_env = False
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"central run exited {self.process.returncode}: {self.process.stderr.read()}")  # type: ignore[union-attr]
            try:
                if http.get(f"http://127.0.0.1:{self.port}/readyz", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)  # a benchmark's start-up wait, not a test's synchronisation
        raise SystemExit("central run was not ready within 120 s")

    def cpu_seconds(self) -> Optional[float]:
        """User + system CPU of the handler so far (Linux /proc), None elsewhere."""
        try:
            with open(f"/proc/{self.process.pid}/stat", encoding="ascii") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()


def acknowledged(state: ArmState) -> Dict[str, float]:
    """EventId (lower case) -> when its first accepted acknowledge POST arrived."""
    seen: Dict[str, float] = {}
    for ack in state.maintenance.acknowledgements:
        if ack.accepted:
            seen.setdefault(ack.event_id.lower(), ack.at)
    return seen


def wait_acknowledged(state: ArmState, ids: List[str], seconds: float) -> Dict[str, float]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen = acknowledged(state)
        if all(i in seen for i in ids):
            return seen
        time.sleep(0.02)
    raise SystemExit(f"only {len(acknowledged(state))} of {len(ids)} events acknowledged within {seconds:g} s")


def setup(state: ArmState) -> PlacementGroup:
    ss = state.add_scale_set(SUB, "rg", "web", capacity=3, extra_properties={"scheduledEventsPolicy": POLICY})
    group = PlacementGroup(clock=SYSTEM_CLOCK, auto_start=False)
    state.maintenance.attach(ss, group)
    return group


def latency(arm: ArmServers, state: ArmState, endpoints: azurite.Endpoints, events: int, poll: float) -> None:
    group = setup(state)
    name = f"lat{uuid.uuid4().hex[:12]}"
    writer = TimedWriter(endpoints.connection_string, name)
    writer.create_queue()
    delivery = EventGridDelivery(writer).attach(state.maintenance)
    handler = Handler(arm, endpoints, name, poll)
    try:
        handler.wait_ready()
        gate = threading.Event()
        ids = []
        for _ in range(events):  # one at a time (no queueing behind the previous), at a random phase of the poll
            gate.wait(random.uniform(0.0, poll))
            ids.append(group.add_event("Terminate", ["web_1"], not_before=SYSTEM_CLOCK.now() + 600).lower())
            wait_acknowledged(state, ids[-1:], 120)
        acks = acknowledged(state)
    finally:
        handler.stop()
        delivery.close()
    lat = sorted(acks[i] - writer.enqueued[i] for i in ids)
    print(f"latency, message enqueued -> acknowledge POST received (central run --source queue, no hook, "
          f"--poll-interval {poll:g}), {len(lat)} events: median {statistics.median(lat) * 1000:.0f} ms, "
          f"p90 {lat[int(len(lat) * 0.9) - 1] * 1000:.0f} ms, max {lat[-1] * 1000:.0f} ms")


def put_all(writer: StorageQueueWriter, texts: List[str]) -> None:
    for text in texts:
        writer.put(text)


class Collector(StorageQueueWriter):
    """Keeps the messages Event Grid would put, to enqueue them all at once later."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.texts: List[str] = []

    def put(self, text: str) -> None:
        self.texts.append(text)


def throughput(arm: ArmServers, state: ArmState, endpoints: azurite.Endpoints, events: int, poll: float) -> None:
    group = setup(state)
    name = f"thr{uuid.uuid4().hex[:12]}"
    collector = Collector(endpoints.connection_string, name)
    delivery = EventGridDelivery(collector).attach(state.maintenance)
    ids = [group.add_event("Terminate", ["web_1"], not_before=SYSTEM_CLOCK.now() + 900).lower()
           for _ in range(events)]
    if not delivery.flush():
        raise SystemExit("the Event Grid delivery did not empty")
    delivery.close()
    writer = StorageQueueWriter(endpoints.connection_string, name)
    writer.create_queue()
    handler = Handler(arm, endpoints, name, poll)
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cores) > 1:
        os.sched_setaffinity(handler.process.pid, {cores[0]})
    try:
        handler.wait_ready()  # started, its first (empty) poll done: what follows is the work alone
        cpu0, wall0 = handler.cpu_seconds(), time.time()
        texts = list(collector.texts)
        putters = [threading.Thread(target=put_all, args=(writer, texts[i::4])) for i in range(4)]
        for putter in putters:
            putter.start()
        for putter in putters:
            putter.join()
        enqueued = time.time() - wall0
        acks = wait_acknowledged(state, ids, 900)
        cpu1 = handler.cpu_seconds()
    finally:
        handler.stop()
    wall = max(acks.values()) - wall0
    cpu = "" if cpu0 is None or cpu1 is None else \
        f", {(cpu1 - cpu0) / events * 1000:.1f} ms of the handler's CPU per event"
    print(f"throughput, central run --source queue pinned to one core"
          f"{'' if len(cores) > 1 else ' (no affinity: one core here)'}, --poll-interval {poll:g}, {events} "
          f"events enqueued at once (in {enqueued:.1f} s, 4 writers) into the idle handler's queue: "
          f"{events / wall:.1f} events/s, first message put -> last acknowledgement {wall:.1f} s{cpu}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--throughput", type=int, default=300)
    parser.add_argument("--poll-interval", type=float, default=0.5, help="central run --poll-interval (>= 0.5)")
    args = parser.parse_args()
    if not azurite.is_installed():
        print(azurite.missing_azurite_message(), file=sys.stderr)
        return 1
    server = azurite.start()  # loopback, in memory, --disableTelemetry
    try:
        with start_arm(ArmState(clock=SYSTEM_CLOCK)) as arm:
            latency(arm, arm.reset(ArmState(clock=SYSTEM_CLOCK)), server.endpoints, args.events, args.poll_interval)
            throughput(arm, arm.reset(ArmState(clock=SYSTEM_CLOCK)), server.endpoints, args.throughput,
                       args.poll_interval)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
