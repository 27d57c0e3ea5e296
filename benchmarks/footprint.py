"""Install footprint and agent memory, each in a real fresh virtual environment (loopback only).

1. `pip install --no-compile vmss-terminate` (the lean agent install exactly as the templates do it,
   built from this checkout, not editable): distributions and MB of site-packages, the venv's own pip
   excluded, measured again after the agent has run (Python then writes the `.pyc` of the modules
   the agent imports). Targets: <= 8 distributions, <= 6 MB. A plain `pip install` (every module
   compiled) is measured too, for the record. No `azure`, `msal` or `cryptography` may be importable, and a control command
   (`vmss-terminate status`) must exit 2 with one line naming `pip install 'vmss-terminate[control]'`.
2. `pip install 'vmss-terminate[control]'`: the same figures, for the record.
3. In the lean venv: the agent's steady RSS (`vmss-terminate agent run`, idle polling against the
   local IMDS emulator) next to `python -c "import requests"`. Target: <= 1.1x. Also with
   `--listen` (the metrics and probe server) and with `--kubernetes` (the node drain, pointed at the
   local Kubernetes API emulator), for the record, and the size once those have run.

usage: python benchmarks/footprint.py [--idle 10]     (Linux: RSS is read from /proc)
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Tuple

from vmss_terminate_sim.emulator.imds.app import ImdsEmulator, PlacementGroup
from vmss_terminate_sim.emulator.kube import KubeState, start_kube
from vmss_terminate_sim.emulator.server import EmulatorServer

REPO = Path(__file__).resolve().parents[1]
VM = "myvmss_3"
MB = 1_000_000
MIB = 1024 * 1024
OWN_TOOLS = ("pip", "setuptools", "_distutils_hack", "pkg_resources", "distutils-precedence.pth")


def make_venv(where: Path, requirement: str, *pip_args: str) -> Tuple[Path, float]:
    """A fresh venv at `where` with `requirement` installed; returns its python and install seconds."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    python = where / "bin" / "python"
    started = time.monotonic()
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *pip_args,
                    requirement], check=True, env=_no_proxy_env())
    return python, time.monotonic() - started


def site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def distributions(site: Path) -> List[str]:
    """Installed distributions, the venv's own installer excluded."""
    names = [p.name.split("-")[0] for p in site.glob("*.dist-info")]
    return sorted(n for n in names if n.lower() not in ("pip", "setuptools"))


def size_bytes(site: Path) -> int:
    total = 0
    for entry in site.iterdir():
        if entry.name.split("-")[0] in OWN_TOOLS:
            continue
        files = [entry] if entry.is_file() else [p for p in entry.rglob("*") if p.is_file()]
        total += sum(p.stat().st_size for p in files)
    return total


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def floor_rss(python: Path) -> int:
    proc = subprocess.Popen([str(python), "-c", "import requests, sys; print('ready', flush=True); sys.stdin.read()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    proc.stdout.readline()
    value = rss(proc.pid)
    proc.stdin.close()
    proc.wait(10)
    return value


def agent_rss(python: Path, seconds: float, *extra: str) -> Dict[str, float]:
    script = python.parent / "vmss-terminate"
    with EmulatorServer(ImdsEmulator(PlacementGroup(), vm_name=VM, rate_limit=None)) as server, \
            tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen([str(script), "agent", "run", "--imds-url", server.url, "--poll-interval", "1",
                                 "--state-file", os.path.join(tmp, "state.json"), *extra],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_no_proxy_env())
        try:
            if not server.log.wait_for(lambda r: sum("scheduledevents" in x.path for x in r) >= 3, 30):
                raise SystemExit("the agent did not start polling")
            gate, samples = threading.Event(), []
            t0 = time.monotonic()
            while time.monotonic() - t0 < seconds:
                samples.append(rss(proc.pid))
                gate.wait(0.5)
        finally:
            proc.terminate()
            proc.wait(10)
    return {"median": statistics.median(samples), "max": max(samples)}


def free_port() -> int:
    """A loopback port nothing listens on now (the agent refuses `--listen` port 0)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def control_refusal(python: Path) -> str:
    proc = subprocess.run([str(python.parent / "vmss-terminate"), "status", "-g", "rg", "-n", "vmss"],
                          capture_output=True, text=True, timeout=60)
    line = proc.stderr.strip()
    ok = proc.returncode == 2 and len(line.splitlines()) == 1 and "pip install 'vmss-terminate[control]'" in line
    return f"exit {proc.returncode}: {line} [{'OK' if ok else 'MISSED'}]"


def importable(python: Path, module: str) -> bool:
    return subprocess.run([str(python), "-c", f"import {module}"], capture_output=True).returncode == 0


def _no_proxy_env() -> Dict[str, str]:
    """The environment an instance has: no proxies, and Python free to write `.pyc` files."""
    return {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and k != "PYTHONDONTWRITEBYTECODE"}


def _verdict(ok: bool) -> str:
    return "OK" if ok else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle polling sampled for RSS")
    args = parser.parse_args()
    print(f"Python {sys.version.split()[0]} on {sys.platform}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        compiled, _ = make_venv(Path(tmp) / "compiled", str(REPO))
        print(f"plain `pip install vmss-terminate` (every module compiled): "
              f"{size_bytes(site_packages(compiled)) / MB:.2f} MB of site-packages")
        lean, lean_s = make_venv(Path(tmp) / "lean", str(REPO), "--no-compile")
        site = site_packages(lean)
        dists, size = distributions(site), size_bytes(site)
        print(f"lean `pip install --no-compile vmss-terminate`, as the templates install it ({lean_s:.0f} s): "
              f"{len(dists)} distributions [target <= 8: {_verdict(len(dists) <= 8)}], {size / MB:.2f} MB of "
              f"site-packages [target <= 6 MB: {_verdict(size <= 6 * MB)}]: {', '.join(dists)}")
        leaked = [m for m in ("azure", "msal", "cryptography") if importable(lean, m)]
        print(f"  importable Azure SDK modules: {leaked or 'none'} [{_verdict(not leaked)}]")
        print(f"  vmss-terminate status without [control]: {control_refusal(lean)}")
        floor = floor_rss(lean)
        agent = agent_rss(lean, args.idle)
        ratio = agent["median"] / floor
        print(f"  RSS agent idle median {agent['median'] / MIB:.1f} MiB (max {agent['max'] / MIB:.1f}), "
              f"`python -c \"import requests\"` {floor / MIB:.1f} MiB, ratio {ratio:.2f}x "
              f"[target <= 1.1x: {_verdict(ratio <= 1.1)}]")
        listening = agent_rss(lean, args.idle, "--listen", f"127.0.0.1:{free_port()}")  # port 0 is refused
        print(f"  RSS agent idle with --listen median {listening['median'] / MIB:.1f} MiB, "
              f"ratio {listening['median'] / floor:.2f}x")
        after = size_bytes(site)
        print(f"  site-packages after the agent ran (its modules' .pyc written): {after / MB:.2f} MB "
              f"[target <= 6 MB: {_verdict(after <= 6 * MB)}]")
        with start_kube(KubeState()) as kube:  # --kubernetes: the drain's modules loaded at start
            kube.state.add_node("node-3")
            kubeconfig = kube.write_kubeconfig(Path(tmp) / "kubeconfig")
            drain = agent_rss(lean, args.idle, "--kubernetes", "--kubeconfig", str(kubeconfig), "--node-name", "node-3")
        print(f"  RSS agent idle with --kubernetes median {drain['median'] / MIB:.1f} MiB, "
              f"ratio {drain['median'] / floor:.2f}x")
        after = size_bytes(site)
        print(f"  site-packages after the agent ran with --kubernetes too: {after / MB:.2f} MB "
              f"[target <= 6 MB: {_verdict(after <= 6 * MB)}]")

        control, control_s = make_venv(Path(tmp) / "control", f"{REPO}[control]")
        site = site_packages(control)
        dists, size = distributions(site), size_bytes(site)
        print(f"`pip install 'vmss-terminate[control]'` ({control_s:.0f} s): {len(dists)} distributions, "
              f"{size / MB:.1f} MB of site-packages: {', '.join(dists)}")


if __name__ == "__main__":
    main()
