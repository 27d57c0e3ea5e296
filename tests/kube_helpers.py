"""The real kubectl against the Kubernetes API emulator, for any test package (import as
`from kube_helpers import ...`). kubectl sends bearer tokens only over HTTPS, so `serve_for_kubectl`
serves HTTPS with a throwaway CA; every bit of kubectl state (kubeconfig, discovery cache, HOME)
stays in the test's directory."""

from __future__ import annotations

import functools
import json
import os
import queue
import shutil
import ssl
import subprocess
import threading
from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple

import pytest

from vmss_terminate.clock import wait_until
from vmss_terminate_sim.emulator.kube import KubeServers, KubeState, start_kube

KUBECTL = shutil.which("kubectl")
SKIP_REASON = "kubectl is not installed (CI has v1.32 at /usr/bin/kubectl)"
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason=SKIP_REASON)


@functools.lru_cache(maxsize=1)
def throwaway_ca() -> Tuple[Any, bytes]:
    """One trustme CA per test process, and its PEM."""
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    return ca, ca.cert_pem.bytes()


def serve_for_kubectl(state: Optional[KubeState] = None) -> KubeServers:
    """The emulator over HTTPS on loopback (random port, random bearer token); stop it when done."""
    if KUBECTL is None:
        pytest.skip(SKIP_REASON)
    ca, ca_pem = throwaway_ca()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    return start_kube(state if state is not None else KubeState(), ssl_context=context, ca_pem=ca_pem)


class Kubectl:
    """Runs the real kubectl against one emulator with a kubeconfig, cache and HOME under `directory`
    (no ~/.kube, no KUBECONFIG from the environment)."""

    def __init__(self, servers: KubeServers, directory: Path) -> None:
        assert KUBECTL is not None
        self.kubeconfig = servers.write_kubeconfig(directory / "kubeconfig")
        self.cache = directory / "kube-cache"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        self.env["HOME"] = str(directory / "home")

    def run(self, *args: str, timeout: float = 60, stdin: Optional[str] = None) -> "subprocess.CompletedProcess[str]":
        command: List[Any] = [KUBECTL, "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.cache), *args]
        return subprocess.run(command, capture_output=True, text=True, env=self.env, timeout=timeout, input=stdin)

    def start(self, *args: str) -> "Streaming":
        """kubectl running in the background (`get -w`): its stdout read line by line."""
        command: List[Any] = [KUBECTL, "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.cache), *args]
        return Streaming(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                          env=self.env))

    def ok(self, *args: str, timeout: float = 60, stdin: Optional[str] = None) -> str:
        result = self.run(*args, timeout=timeout, stdin=stdin)
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stdout}{result.stderr}"
        return result.stdout


class KubectlWatch:
    """The real `kubectl get ... --watch -o json --output-watch-events` as a running process: every
    change it streams ({"type": ADDED|MODIFIED|DELETED, "object": ...}) kept in order, for a test to
    wait on (`wait_for`, no sleeping) and to assert on once `stop()` returned."""

    def __init__(self, kubeconfig: str, directory: Path, *what: str) -> None:
        assert KUBECTL is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE") and "PROXY" not in k.upper()}
        env["HOME"] = str(directory / "home")
        self.changes: List[Any] = []
        self.ended = False
        self._changed = threading.Condition()
        self.process = subprocess.Popen(
            [KUBECTL, "--kubeconfig", kubeconfig, "--cache-dir", str(directory / "kube-cache"), "get", *what,
             "--watch", "-o", "json", "--output-watch-events"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self._reader = threading.Thread(target=self._read, daemon=True, name="kubectl-watch")
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        pending = ""
        for line in self.process.stdout:  # one JSON document per change (pretty or compact)
            pending += line
            try:
                change = json.loads(pending)
            except json.JSONDecodeError:
                continue
            pending = ""
            with self._changed:
                self.changes.append(change)
                self._changed.notify_all()
        with self._changed:
            self.ended = True
            self._changed.notify_all()

    def wait_for(self, check: Callable[[List[Any]], bool], wait_seconds: float) -> bool:
        """Until `check(changes so far)` holds, the stream ends, or `wait_seconds` real seconds."""
        return wait_until(self._changed, lambda: self.ended or check(self.changes), wait_seconds) and \
            check(self.changes)

    def stop(self) -> str:
        """End kubectl (it watches until stopped) and the reader; kubectl's stderr."""
        self.process.terminate()
        try:
            _, err = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        self._reader.join(timeout=30)
        return err


class Streaming:
    """A running kubectl whose stdout lines arrive on a queue (a reader thread): `line(timeout)`
    waits for the next one, bounded, instead of sleeping. Use as a context manager: it is ended
    (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, process: "subprocess.Popen[str]") -> None:
        self.process = process
        self._lines: "queue.Queue[Optional[str]]" = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)  # the end of its output

    def line(self, timeout: float = 30) -> Optional[str]:
        """The next line kubectl printed, None once its output ended; fails after `timeout` seconds."""
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"kubectl printed nothing in {timeout} s") from None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._reader.join(10)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> "Streaming":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
