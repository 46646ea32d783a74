"""Loopback ports for the test services: each checkout's services pick their own.

Fixed ports (54329, 57480, 56789) made two checkouts on one machine collide: the second one's
tests found the port answering and used the first one's server. A service now takes the port it
recorded in its checkout's `.tmp/` when that port is still free, else one the kernel hands out
free; an environment variable still pins it. Which server answers is decided by the service's own
files (pid files naming its data folder), never by a port merely answering.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Collection

LOOPBACK = "127.0.0.1"


class PortTakenError(RuntimeError):
    """A port pinned by an environment variable is held by a process of another checkout."""


def port_free(port: int) -> bool:
    """True when nothing holds 127.0.0.1:`port`: a socket can bind it as the servers do.

    SO_REUSEADDR, as PostgreSQL and Ceph set it, so a connection lingering in TIME_WAIT does
    not count as taken, while a listener (or any bound socket) does.
    """
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def free_port(avoid: Collection[int] = ()) -> int:
    """A port on 127.0.0.1 that nothing holds right now and that is not in `avoid`."""
    while True:
        with socket.socket() as sock:
            sock.bind((LOOPBACK, 0))
            port = int(sock.getsockname()[1])
        if port not in avoid:
            return port


def pick_port(pinned: int | None, recorded: int | None, avoid: Collection[int], env: str) -> int:
    """The port a service starts on: `pinned` (from `env`) if set, else `recorded` if still
    free, else a fresh free one (never one of `avoid`, the ports already chosen for siblings).

    Raises PortTakenError when the pinned port is held by someone else.
    """
    if pinned is not None:
        if not port_free(pinned):
            raise PortTakenError(
                f"port {pinned} ({env}) is held by another process, not by this checkout's "
                f"service: unset {env} or free the port"
            )
        return pinned
    if recorded is not None and recorded not in avoid and port_free(recorded):
        return recorded
    return free_port(avoid)


def env_port(name: str) -> int | None:
    """The port pinned by environment variable `name`, or None when it is unset or empty."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        port = int(value)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise ValueError(f"{name} must be a TCP port from 1 to 65535, not {value!r}")
    return port
