"""Loopback checks shared by the control plane and the emulators (stdlib only, no azure import).

Why one module: "may a bearer token go over plain http to this URL?" has exactly one answer in
this project -- only to a loopback host (127.0.0.0/8, ::1, localhost), i.e. the local emulator.
"""

from __future__ import annotations

import ipaddress
from typing import Optional
from urllib.parse import urlsplit


def is_loopback_host(host: Optional[str]) -> bool:
    """True for `localhost`, 127.0.0.0/8 and ::1 (with or without brackets)."""
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_loopback_url(url: str) -> bool:
    """The URL's host is loopback, whatever the scheme."""
    return is_loopback_host(urlsplit(url).hostname)


def is_loopback_http(url: str) -> bool:
    """A plain-http URL to a loopback host: the only place a bearer token may go without TLS."""
    return urlsplit(url).scheme.lower() == "http" and is_loopback_url(url)


def is_local_host(host: Optional[str]) -> bool:
    """Loopback or link-local (169.254.0.0/16, fe80::/10): hosts a proxy can never reach for us, like
    the IMDS and managed-identity endpoints, so requests to them must never go through one."""
    if is_loopback_host(host):
        return True
    try:
        return ipaddress.ip_address(str(host).strip("[]")).is_link_local
    except ValueError:
        return False
