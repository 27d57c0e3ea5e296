"""Where the Kubernetes API is and how the agent proves who it is: in-cluster or a kubeconfig.

- In-cluster (the DaemonSet): `KUBERNETES_SERVICE_HOST` / `KUBERNETES_SERVICE_PORT`, the
  service-account token and CA under /var/run/secrets/kubernetes.io/serviceaccount. The token is a
  projected token the kubelet rotates (at 80 % of its lifetime), so it is read again for every
  request, never cached.
- `--kubeconfig FILE` (the systemd way on kubeadm / k3s / RKE2 hosts): the current context's
  cluster (`server`, `certificate-authority[-data]`) and user (`token`, `tokenFile` -- read again
  for every request too --, or `client-certificate[-data]` + `client-key[-data]`). Relative paths
  count from the file's directory, as kubectl reads them. Inline data is written to private (0600)
  files in a private temporary directory, removed when the agent ends.

Refused at start-up (UsageError, exit 2), never at NotBefore: a plain-http `server` that is not
loopback (the token would cross the network in clear), `insecure-skip-tls-verify`, and
credential plugins (`exec`, `auth-provider`), which would run programs or need libraries the lean
agent does not have.
"""

from __future__ import annotations

import atexit
import base64
import os
import shutil
import stat
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union
from urllib.parse import urlsplit

from vmss_terminate.errors import UsageError
from vmss_terminate.net import is_loopback_http
from vmss_terminate.params import shown, strict_whole
from vmss_terminate.pipeline.kubernetes.yamlish import HINT, YamlSubsetError, loads

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass
class Access:
    """The API server and the credentials for it. `token()` is called for every request."""

    server: str
    source: str  # "in-cluster" or "kubeconfig PATH" (for messages; never a secret)
    token: Callable[[], Optional[str]] = lambda: None
    verify: Union[bool, str] = True  # a CA bundle path, or True: the system's
    cert: Optional[Tuple[str, str]] = None  # client certificate and key files
    _private_dir: Optional[str] = field(default=None, repr=False)

    def close(self) -> None:
        """Remove the files written for inline certificate data."""
        if self._private_dir:
            shutil.rmtree(self._private_dir, ignore_errors=True)
            self._private_dir = None


def load_access(kubeconfig: Optional[str] = None, environ: Optional[Mapping[str, str]] = None,
                service_account_dir: Optional[str] = None) -> Access:
    """`--kubeconfig FILE`, else in-cluster (KUBERNETES_SERVICE_HOST set), else $KUBECONFIG;
    UsageError naming what is missing otherwise. `service_account_dir` None: SERVICE_ACCOUNT_DIR,
    read when called (tests point it at a directory of their own)."""
    env = os.environ if environ is None else environ
    if kubeconfig is not None:
        return from_kubeconfig(kubeconfig)
    if env.get("KUBERNETES_SERVICE_HOST"):
        return in_cluster(env, service_account_dir or SERVICE_ACCOUNT_DIR)
    if env.get("KUBECONFIG"):
        return from_kubeconfig(env["KUBECONFIG"].split(os.pathsep)[0])
    raise UsageError("--kubernetes needs cluster credentials: run the agent in a pod (service account, "
                     "KUBERNETES_SERVICE_HOST) or pass --kubeconfig FILE")


def in_cluster(environ: Mapping[str, str], directory: Optional[str] = None) -> Access:
    """The pod's service account: host and port from the environment, token and CA from `directory`."""
    host = environ.get("KUBERNETES_SERVICE_HOST", "").strip()
    port = (environ.get("KUBERNETES_SERVICE_PORT") or environ.get("KUBERNETES_SERVICE_PORT_HTTPS") or "443").strip()
    number = strict_whole(port)  # ASCII digits only: str.isdigit() took '４４３', which failed at NotBefore
    if not host or number is None or not 1 <= number <= 65535:
        raise UsageError(f"in-cluster Kubernetes credentials: KUBERNETES_SERVICE_HOST={shown(host)} / "
                         f"KUBERNETES_SERVICE_PORT={shown(port)} do not name an API server (the port: a "
                         f"whole number from 1 to 65535)")
    directory = directory or SERVICE_ACCOUNT_DIR
    token_file = Path(directory) / "token"
    if not token_file.is_file():
        raise UsageError(f"in-cluster Kubernetes credentials: no service-account token at {token_file} "
                         f"(automountServiceAccountToken: false?)")
    ca_file = Path(directory) / "ca.crt"
    bracketed = f"[{host}]" if ":" in host else host
    return Access(server=f"https://{bracketed}:{number}", source="in-cluster", token=_reader(token_file),
                  verify=str(ca_file) if ca_file.is_file() else True)


def _reader(path: Path) -> Callable[[], Optional[str]]:
    def read() -> Optional[str]:
        try:
            return path.read_text(encoding="utf-8").strip() or None
        except OSError:
            return None  # the request then fails 401 and is retried; the next read may succeed
    return read


MAX_KUBECONFIG_BYTES = 4 << 20  # kubeconfigs are a few KB; a multi-cluster one with CAs tens of KB
READ_SECONDS = 10.0  # real seconds a kubeconfig may take to read (a hung network mount)


def _read_regular(where: Path, what: str) -> str:
    """The text of a regular file, read within READ_SECONDS. A FIFO would block the open (and the
    agent, deaf to SIGTERM: Python retries the interrupted call) until a writer comes; a hung mount
    would block the read. Opened without blocking and checked to be a regular file; read in a
    daemon thread so that a hang costs READ_SECONDS and one line, not the agent."""
    result: Dict[str, Any] = {}

    def read() -> None:
        try:
            fd = os.open(str(where), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    result["error"] = "not a regular file (a FIFO, socket or device?)"
                    return
                os.set_blocking(fd, True)
                with os.fdopen(fd, "rb", closefd=False) as handle:
                    result["text"] = handle.read(MAX_KUBECONFIG_BYTES + 1).decode("utf-8")
            finally:
                os.close(fd)
        except OSError as exc:
            result["error"] = exc.strerror or str(exc)
        except UnicodeDecodeError:
            result["error"] = "not UTF-8 text"

    reader = threading.Thread(target=read, name="read-kubeconfig", daemon=True)
    reader.start()
    reader.join(READ_SECONDS)
    if reader.is_alive():
        raise UsageError(f"cannot read {what}: no answer from the file system in {READ_SECONDS:g} s (a hung mount?)")
    if "error" in result:
        raise UsageError(f"cannot read {what}: {result['error']}")
    text = str(result["text"])
    if len(text) > MAX_KUBECONFIG_BYTES:
        raise UsageError(f"cannot read {what}: larger than {MAX_KUBECONFIG_BYTES} bytes")
    return text


def from_kubeconfig(path: str) -> Access:
    """The current context of the kubeconfig at `path` (UsageError when it cannot be used)."""
    where = Path(path).expanduser()
    text = _read_regular(where, f"--kubeconfig {path}")
    try:
        config = loads(text)
    except YamlSubsetError as exc:
        raise UsageError(f"cannot read --kubeconfig {path}: {exc}") from None
    if not isinstance(config, dict):
        raise UsageError(f"--kubeconfig {path} is not a kubeconfig (no mapping at the top); {HINT}")
    return _resolve(config, where, f"kubeconfig {where}")


def _named(config: Mapping[str, Any], section: str, name: Any, path: Path) -> Dict[str, Any]:
    item_key = section[:-1]  # clusters -> cluster
    for entry in config.get(section) or ():
        if isinstance(entry, dict) and entry.get("name") == name and isinstance(entry.get(item_key), dict):
            return dict(entry[item_key])
    raise UsageError(f"--kubeconfig {path}: no {item_key} named {name!r}")


def _resolve(config: Mapping[str, Any], path: Path, source: str) -> Access:
    current = config.get("current-context")
    if not current:
        raise UsageError(f"--kubeconfig {path}: no current-context (kubectl config use-context NAME)")
    context = _named(config, "contexts", current, path)
    cluster = _named(config, "clusters", context.get("cluster"), path)
    user = _named(config, "users", context.get("user"), path) if context.get("user") else {}
    server = str(cluster.get("server") or "").rstrip("/")
    scheme = urlsplit(server).scheme.lower()
    if scheme not in ("http", "https") or not urlsplit(server).hostname:
        raise UsageError(f"--kubeconfig {path}: server {server!r} is not an http(s) URL")
    if scheme == "http" and not is_loopback_http(server):
        raise UsageError(f"--kubeconfig {path}: server {server} is plain http and not loopback; the "
                         f"credentials would cross the network unencrypted: use https")
    if cluster.get("insecure-skip-tls-verify"):
        raise UsageError(f"--kubeconfig {path}: insecure-skip-tls-verify is not supported; give "
                         f"certificate-authority or certificate-authority-data")
    for plugin in ("exec", "auth-provider"):
        if user.get(plugin):
            raise UsageError(f"--kubeconfig {path}: credential plugins ({plugin}) are not supported by the "
                             f"agent; use a service-account token (token or tokenFile) or a client certificate")
    if user.get("username") or user.get("password"):
        raise UsageError(f"--kubeconfig {path}: basic authentication is not supported; use a token or a "
                         f"client certificate")
    files = _Files(path.parent)
    try:
        verify: Union[bool, str] = files.get(cluster, "certificate-authority") or True
        cert_file = files.get(user, "client-certificate")
        key_file = files.get(user, "client-key")
    except BaseException:
        files.close()
        raise
    if bool(cert_file) != bool(key_file):
        files.close()
        raise UsageError(f"--kubeconfig {path}: a client certificate needs both client-certificate and client-key")
    token: Callable[[], Optional[str]] = lambda: None  # noqa: E731
    if user.get("tokenFile"):
        token = _reader(files.path(str(user["tokenFile"])))
    elif user.get("token"):
        fixed = str(user["token"])
        token = lambda: fixed  # noqa: E731
    return Access(server=server, source=source, token=token, verify=verify,
                  cert=(cert_file, key_file) if cert_file and key_file else None, _private_dir=files.private)


class _Files:
    """Paths of kubeconfig file references: `NAME` (relative to the kubeconfig) or `NAME-data`
    (base64, written to a private temporary file)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.private: Optional[str] = None

    def path(self, value: str) -> Path:
        candidate = Path(value).expanduser()
        return candidate if candidate.is_absolute() else self.base / candidate

    def get(self, section: Mapping[str, Any], key: str) -> Optional[str]:
        data = section.get(f"{key}-data")
        if data:
            try:
                content = base64.b64decode(str(data), validate=True)
            except ValueError:
                raise UsageError(f"--kubeconfig: {key}-data is not base64") from None
            if self.private is None:
                self.private = tempfile.mkdtemp(prefix="vmss-terminate-kube-")  # mode 0700
                atexit.register(shutil.rmtree, self.private, True)
            target = Path(self.private) / key
            fd = os.open(str(target), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(content)
            return str(target)
        value = section.get(key)
        if not value:
            return None
        target = self.path(str(value))
        if not target.is_file():
            raise UsageError(f"--kubeconfig: {key} {target} does not exist")
        return str(target)

    def close(self) -> None:
        if self.private:
            shutil.rmtree(self.private, ignore_errors=True)
