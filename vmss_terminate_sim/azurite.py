"""Azurite, Microsoft's open-source Azure Storage emulator (npm package `azurite`): install it into a
cache outside the repository, start it on loopback, stop it.

    python -m vmss_terminate_sim.azurite install     # once; prints the path of `azurite`

Why a real emulator and not one of ours: the queue source talks to Storage through the real
azure-storage-queue/-blob SDKs, and Microsoft ships the server those SDKs are tested against.

* Installed with npm (`npm install --prefix CACHE azurite@VERSION`, the version pinned here) into
  ${VMSS_TERMINATE_AZURITE_DIR:-~/.cache/vmss-terminate/azurite}; a marker file records the version,
  so a second install is a no-op and a different VMSS_TERMINATE_AZURITE_VERSION reinstalls. Nothing is
  installed globally. Installers racing (test workers) take a file lock.
* Started with `--blobPort 0 --queuePort 0 --tablePort 0` on 127.0.0.1 (Azurite prints the ports it
  got: no port race), `--inMemoryPersistence` (nothing on disk), `--skipApiVersionCheck` (the Python
  SDK may be newer than the server) and ALWAYS `--disableTelemetry`: without it Azurite reports to
  an outside host (its `--help`: "If not specify this parameter Azurite will collect telemetry data
  by default"), and nothing of this project may leave loopback.
* The account is Azurite's documented development account `devstoreaccount1` and its published
  key (Learn, "Use the Azurite emulator for local Azure Storage development": "Well-known storage
  account and key"); it is no secret.

Standard library only: .ci/run calls it before anything else needs it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Dict, Iterator, List, Optional

AZURITE_VERSION = "3.37.0"
"""The npm package version installed and tested (latest on the npm registry on 2026-11-26)."""

ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
"""Azurite's well-known development account and key (public, the same in every Azurite)."""

START_TIMEOUT = 120.0
"""How long `start` waits for Azurite to print its ports (a cold node start on a loaded machine)."""

_MARKER = ".vmss-terminate-azurite-version"
_LISTENING = re.compile(r"Azurite (Blob|Queue|Table) service is successfully listening at (http://\S+)")


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "vmss-terminate" / "azurite"
    return Path(os.environ.get("VMSS_TERMINATE_AZURITE_DIR") or default).expanduser()


def wanted_version() -> str:
    return os.environ.get("VMSS_TERMINATE_AZURITE_VERSION") or AZURITE_VERSION


def executable(root: Optional[Path] = None) -> Path:
    root = cache_dir() if root is None else root
    return root / "node_modules" / ".bin" / ("azurite.cmd" if os.name == "nt" else "azurite")


def install_command() -> str:
    """The command that installs Azurite where `start` looks for it; it runs as printed."""
    return f"{shlex.quote(sys.executable)} -m vmss_terminate_sim.azurite install"


def npm() -> Optional[str]:
    """The npm executable, or None when Node.js/npm is not installed."""
    return shutil.which("npm")


def missing_npm_message() -> str:
    return ("Azurite needs Node.js and npm, which are not installed: install them (e.g. `apt-get install nodejs npm` "
            f"or https://nodejs.org), then run {install_command()}")


def missing_azurite_message() -> str:
    if npm() is None:
        return missing_npm_message()
    return f"Azurite {wanted_version()} is not installed in {cache_dir()}: install it with {install_command()}"


def installed_version(root: Optional[Path] = None) -> str:
    """The version this module installed at `root`, or "" when there is none (or it is broken)."""
    root = cache_dir() if root is None else root
    marker = root / _MARKER
    if not marker.is_file() or not executable(root).is_file():
        return ""
    return marker.read_text(encoding="utf-8").strip()


def is_installed() -> bool:
    return installed_version() == wanted_version()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (POSIX flock; elsewhere no lock: one installer at a time there)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        try:
            import fcntl
        except ImportError:  # Windows
            yield
            return
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def install(root: Optional[Path] = None, version: Optional[str] = None) -> Path:
    """Install Azurite `version` into `root` unless it is there; return the executable.
    Raises OSError (npm missing, npm failed) with a message naming what to do."""
    root = cache_dir() if root is None else root
    version = wanted_version() if version is None else version
    npm_path = npm()
    with _locked(root.parent / (root.name + ".lock")):
        if installed_version(root) == version:
            return executable(root)
        if npm_path is None:
            raise OSError(missing_npm_message())
        if root.exists():
            shutil.rmtree(root)
        staging = Path(tempfile.mkdtemp(prefix=root.name + ".", dir=root.parent))
        log = staging / "npm-install.log"  # npm's chatter stays out of CI output unless it fails
        with open(log, "w", encoding="utf-8") as out:
            done = subprocess.run([npm_path, "install", "--prefix", str(staging), "--no-audit", "--no-fund",
                                   "--no-save", "--ignore-scripts", f"azurite@{version}"],
                                  stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
            raise OSError(f"npm exited {done.returncode} installing azurite@{version}; last lines of {log}:\n"
                          + "\n".join(tail))
        (staging / _MARKER).write_text(version + "\n", encoding="utf-8")
        staging.rename(root)
        return executable(root)


@dataclass(frozen=True)
class Endpoints:
    """Where a running Azurite listens (loopback) and how to reach its development account."""

    blob: str  # http://127.0.0.1:PORT/devstoreaccount1
    queue: str

    @property
    def connection_string(self) -> str:
        return (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
                f"BlobEndpoint={self.blob};QueueEndpoint={self.queue};")

    def to_json(self) -> Dict[str, str]:
        return {"blob": self.blob, "queue": self.queue}

    @classmethod
    def from_json(cls, data: Dict[str, str]) -> "Endpoints":
        return cls(blob=data["blob"], queue=data["queue"])


class Azurite:
    """A running Azurite process on loopback; `stop()` (or the context manager) ends it."""

    def __init__(self, process: "subprocess.Popen[str]", endpoints: Endpoints, workdir: Path) -> None:
        self.process = process
        self.endpoints = endpoints
        self.workdir = workdir

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        stop_pid(self.process.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> "Azurite":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def command(exe: Path) -> List[str]:
    """Azurite's command line: loopback, ports chosen by the OS, memory only, no telemetry."""
    return [str(exe), "--blobHost", "127.0.0.1", "--queueHost", "127.0.0.1", "--tableHost", "127.0.0.1",
            "--blobPort", "0", "--queuePort", "0", "--tablePort", "0",
            "--inMemoryPersistence", "--extentMemoryLimit", "256",
            "--skipApiVersionCheck", "--disableTelemetry", "--silent"]


def start(workdir: Optional[Path] = None, *, timeout: float = START_TIMEOUT) -> Azurite:
    """Start the installed Azurite and wait for its ports. Raises OSError naming the install command
    when it is not installed, or with its output when it does not come up within `timeout`.
    It runs in a session of its own: a Ctrl-C meant for the caller does not reach it, and it lives
    until `stop()` / `stop_pid(pid)` (the test fixture shares one between processes that way)."""
    exe = executable()
    if not is_installed():
        raise OSError(missing_azurite_message())
    workdir = Path(tempfile.mkdtemp(prefix="azurite-")) if workdir is None else workdir
    workdir.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(command(exe), cwd=str(workdir), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert process.stdout is not None
    try:
        endpoints = _read_endpoints(process, process.stdout, timeout)
    except BaseException:
        stop_pid(process.pid)
        process.wait()
        raise
    # keep reading its output so a full pipe never blocks it (it prints little with --silent)
    threading.Thread(target=_drain, args=(process.stdout,), name="azurite-output", daemon=True).start()
    return Azurite(process, endpoints, workdir)


def _read_endpoints(process: "subprocess.Popen[str]", out: IO[str], timeout: float) -> Endpoints:
    found: Dict[str, str] = {}
    lines: List[str] = []
    done = threading.Event()

    def read() -> None:
        for line in out:
            lines.append(line.rstrip())
            match = _LISTENING.search(line)
            if match:
                found[match.group(1)] = match.group(2).rstrip("/")
            if "Blob" in found and "Queue" in found:
                break
        done.set()

    reader = threading.Thread(target=read, name="azurite-start", daemon=True)
    reader.start()
    done.wait(timeout)
    if "Blob" not in found or "Queue" not in found:
        state = f"exited {process.poll()}" if process.poll() is not None else f"no ports after {timeout:.0f} s"
        raise OSError(f"Azurite did not start ({state}): " + " | ".join(lines[-10:]))
    return Endpoints(blob=f"{found['Blob']}/{ACCOUNT}", queue=f"{found['Queue']}/{ACCOUNT}")


def _drain(out: IO[str]) -> None:
    with contextlib.suppress(ValueError, OSError):
        for _ in out:
            pass


def stop_pid(pid: int) -> None:
    """End the Azurite started with `pid` (its own process group: node and anything it started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        if os.name == "nt":
            os.kill(pid, signal.SIGTERM)
        else:
            os.killpg(pid, signal.SIGTERM)


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in (["install"], []):
        print("usage: python -m vmss_terminate_sim.azurite install", file=sys.stderr)
        return 2
    version = wanted_version()
    started = time.monotonic()
    state = "cached" if is_installed() else "installed"
    if state == "installed":
        print(f"installing azurite {version} into {cache_dir()} (once; cached for later runs)", file=sys.stderr)
    try:
        exe = install()
    except OSError as exc:
        print(f"error: could not install azurite {version}: {exc}", file=sys.stderr)
        return 1
    print(f"azurite {version} {state} in {time.monotonic() - started:.1f} s", file=sys.stderr)
    print(exe)
    return 0


if __name__ == "__main__":
    sys.exit(main())
