"""The callback allowlist, `BATCHCROP_CALLBACK_HOSTS`: its grammar, checked at start-up, and
which URLs it lets batchcrop call (docs/design.md §7, callbacks; ADR 0016).

An entry is one of:

- a host name, `hooks.example.com` (IDNA names are compared in their ASCII form);
- `*.example.com`: every name below example.com (at least two labels after `*.`);
- an IP address, `203.0.113.7`, `[2001:db8::1]` or bare `2001:db8::1`;

each optionally followed by `:PORT` (that port only) or `:*` (any port); without a port an
entry allows only the URL scheme's default port (80 for http, 443 for https).

A URL naming its host by name may only reach public addresses: at delivery the name is
resolved, refused (`address_not_allowed`) if any address is loopback, private, link-local,
multicast or otherwise not global, and the request goes to an address so checked. A receiver
on an internal address is called by its IP address, listed as such.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

HOST_NAME_CHARS_MAX = 253
LABEL_CHARS_MAX = 63
PORT_MAX = 65535
WILDCARD_LABELS_MIN = 2
"""`*.example.com` at least: a wildcard over a whole top-level domain is refused."""
_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")


HOST_NOT_ALLOWED = "host_not_allowed"
PORT_NOT_ALLOWED = "port_not_allowed"
ADDRESS_NOT_ALLOWED = "address_not_allowed"
DEFAULT_PORTS = {"http": 80, "https": 443}


class CallbackHostsError(ValueError):
    """A `BATCHCROP_CALLBACK_HOSTS` entry that is not a host pattern; the message says why."""


@dataclass(frozen=True)
class HostRule:
    """One parsed allowlist entry."""

    host: str
    """ASCII, lower-case; an IP address in its canonical form (IPv6 without brackets)."""
    wildcard: bool = False
    """True for `*.host`: names strictly below `host`."""
    port: int | None = None
    """The one port allowed; None with `any_port` False: the scheme's default port only."""
    any_port: bool = False
    ip: bool = False
    """The entry is an IP address literal."""

    def allows_port(self, port: int, default_port: int) -> bool:
        """Whether this entry allows `port` (`default_port`: the URL scheme's)."""
        if self.any_port:
            return True
        return port == (default_port if self.port is None else self.port)

    def matches_host(self, host: str) -> bool:
        """Whether `host` (ASCII, lower-case, an IP without brackets) is named by this entry."""
        if self.wildcard:
            return host.endswith("." + self.host)
        if self.ip:
            return _canonical_ip(host) == self.host
        return host == self.host


def _canonical_ip(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def _ascii_name(name: str) -> str:
    """`name` in the ASCII (IDNA) form URLs are compared in; CallbackHostsError when none."""
    if name.isascii():
        return name.lower()
    # Imported here: settings (and so every command's start-up) parse the allowlist, and a
    # non-ASCII name, the only one needing httpx's IDNA, is rare.
    import httpx  # noqa: PLC0415

    try:
        return httpx.URL(f"http://{name}/").raw_host.decode("ascii").lower()
    except (httpx.InvalidURL, ValueError):
        raise CallbackHostsError("is not a valid (IDNA) host name") from None


def _port(text: str) -> tuple[int | None, bool]:
    """(port, any port) of the text after an entry's colon."""
    if text == "*":
        return None, True
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= PORT_MAX:
        raise CallbackHostsError(f"has a port that is not 1..{PORT_MAX} or *")
    return int(text), False


def parse_entry(entry: str) -> HostRule:
    """One allowlist entry parsed; CallbackHostsError (naming no secret) when malformed."""
    text = entry.strip()
    if not text:
        raise CallbackHostsError("is empty")
    if "://" in text or "/" in text or "?" in text or "#" in text:
        raise CallbackHostsError("must be a host (and port), not a URL: no scheme, path or query")
    if "@" in text:
        raise CallbackHostsError("must not carry credentials")
    if text.startswith("[") or text.count(":") > 1:
        return _ipv6_entry(text)
    host, port, any_port = text, None, False
    if ":" in text:
        host, _, port_text = text.partition(":")
        port, any_port = _port(port_text)
    ip = _canonical_ip(host)
    if ip is not None:
        return HostRule(ip, port=port, any_port=any_port, ip=True)
    wildcard = host.startswith("*.")
    name = _checked_name(host[2:] if wildcard else host)
    if wildcard and name.count(".") + 1 < WILDCARD_LABELS_MIN:
        raise CallbackHostsError("is a wildcard over a whole top-level domain")
    return HostRule(name, wildcard=wildcard, port=port, any_port=any_port)


def _ipv6_entry(text: str) -> HostRule:
    """`[v6]`, `[v6]:port`, `[v6]:*` or a bare `v6` (no port: brackets give one)."""
    port, any_port = None, False
    host = text
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise CallbackHostsError("has an unclosed [")
        host, rest = text[1:close], text[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise CallbackHostsError("has text after its ]")
            port, any_port = _port(rest[1:])
    ip = _canonical_ip(host)
    if ip is None or ":" not in ip:
        raise CallbackHostsError("is not an IPv6 address (in [ ] to give a port)")
    return HostRule(ip, port=port, any_port=any_port, ip=True)


def _checked_name(host: str) -> str:
    """A host name's ASCII form, without a final dot, its labels checked."""
    name = _ascii_name(host).rstrip(".")
    labels = name.split(".")
    if "*" in name:
        raise CallbackHostsError("may hold * only as its whole first label (*.example.com)")
    if len(name) > HOST_NAME_CHARS_MAX or any(not label for label in labels):
        raise CallbackHostsError("has an empty label or is too long")
    if any(len(label) > LABEL_CHARS_MAX or not _LABEL.fullmatch(label) for label in labels):
        raise CallbackHostsError("has a label that is not letters, digits and inner hyphens")
    return name


def parse_hosts(entries: tuple[str, ...]) -> tuple[HostRule, ...]:
    """Every entry parsed, in order; CallbackHostsError naming the first malformed one."""
    rules = []
    for entry in entries:
        try:
            rules.append(parse_entry(entry))
        except CallbackHostsError as exc:
            raise CallbackHostsError(
                f"BATCHCROP_CALLBACK_HOSTS entry {entry.strip()!r} {exc}"
            ) from None
    return tuple(rules)


def matching_rules(host: str, hosts: tuple[str, ...]) -> list[HostRule]:
    """The entries of `hosts` naming `host` (ASCII, lower-case); malformed entries (refused
    at start-up) name nothing."""
    found = []
    for entry in hosts:
        try:
            rule = parse_entry(entry)
        except CallbackHostsError:
            continue
        if rule.matches_host(host):
            found.append(rule)
    return found


def destination_refusal(url: httpx.URL, hosts: tuple[str, ...]) -> str | None:
    """Why the allowlist `hosts` refuses `url` (an http(s) URL with a host, parsed by httpx):
    `host_not_allowed` when no entry names its host, `port_not_allowed` when those that do
    allow another port; None when it is allowed. Name resolution is not consulted (see
    `address_refusal`)."""
    host = url.raw_host.decode("ascii").lower()
    rules = matching_rules(host, hosts)
    if not rules:
        return HOST_NOT_ALLOWED
    default_port = DEFAULT_PORTS.get(url.scheme, 0)
    port = default_port if url.port is None else url.port
    if not any(rule.allows_port(port, default_port) for rule in rules):
        return PORT_NOT_ALLOWED
    return None


def is_ip_literal(url: httpx.URL) -> bool:
    """Whether `url` names its host by an IP address (which an allowlist entry then lists)."""
    return _canonical_ip(url.raw_host.decode("ascii")) is not None


_EMBEDDING_PREFIXES = (
    ipaddress.IPv6Network("64:ff9b::/96"),  # NAT64, well-known prefix (RFC 6052)
    ipaddress.IPv6Network("::ffff:0:0/96"),  # IPv4-mapped
)
"""Prefixes whose last 32 bits are an IPv4 address the packet reaches: judged as that address."""
_NEVER_GLOBAL_PREFIXES = (
    ipaddress.IPv6Network("64:ff9b:1::/48"),  # local-use NAT64 (RFC 8215)
    ipaddress.IPv6Network("::ffff:0:0:0/96"),  # IPv4-translated (SIIT, RFC 2765)
    ipaddress.IPv6Network("::/96"),  # IPv4-compatible, deprecated (RFC 4291 §2.5.5.1)
)
"""Prefixes meaningful only inside an operator's network, whatever IPv4 address they embed;
Python's `is_global` (3.11) calls them global."""


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address a NAT64, IPv4-mapped or 6to4 address carries its packets to."""
    if ip.sixtofour is not None:
        return ip.sixtofour
    if any(ip in prefix for prefix in _EMBEDDING_PREFIXES):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def is_internal(address: str) -> bool:
    """Whether `address` is loopback, private, link-local, shared, reserved, unspecified or
    multicast: anything but a global unicast address. An IPv6 address embedding an IPv4
    address (NAT64 `64:ff9b::/96`, IPv4-mapped, 6to4 `2002::/16`) is judged by that IPv4
    address too; local-use NAT64, IPv4-translated and IPv4-compatible addresses are
    internal (docs/design.md §7, callbacks)."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address):
        if any(ip in prefix for prefix in _NEVER_GLOBAL_PREFIXES):
            return True
        embedded = _embedded_ipv4(ip)
        if embedded is not None and (not embedded.is_global or embedded.is_multicast):
            return True
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


def address_refusal(url: httpx.URL, addresses: list[str]) -> str | None:
    """`address_not_allowed` when `url` names its host by name and one of the `addresses` it
    resolved to is internal (`is_internal`); None otherwise. An IP address in the URL was
    listed explicitly (`destination_refusal` checked it), so it may be internal."""
    if is_ip_literal(url):
        return None
    if not addresses or any(is_internal(address) for address in addresses):
        return ADDRESS_NOT_ALLOWED
    return None
