"""Where a client-chosen URL may lead: public addresses only, checked on the address actually dialled.

The gateway refuses a client URL that names a non-public address as written (``api.admission``). A
name can still resolve to one, or resolve to a public address when checked and a private one when
dialled (DNS rebinding). ``PublicOnlyTransport`` closes both: it resolves the host once per request,
refuses the request unless every address is public (or in a network the operator listed), and
connects to the address it checked, keeping the name in the ``Host`` header and for TLS (SNI and
certificate checks), so no second lookup can send the request elsewhere.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated

import httpx
from pydantic import AfterValidator

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[list[str]]]

LOCAL_NAME_SUFFIXES = (".localhost", ".local", ".internal")
WORKER_NETWORKS_SETTING = "PARLEY_WORKER_CLIENT_URL_NETWORKS"


class EgressRefused(Exception):
    """A client URL leads to an address clients may not reach; ``reason`` is fit to show the client."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def local_name(host: str) -> bool:
    """``localhost`` and the suffixes that only ever name this machine or its network."""
    host = host.rstrip(".").lower()
    return host == "localhost" or host.endswith(LOCAL_NAME_SUFFIXES)


def parse_networks(networks: Sequence[str]) -> tuple[IPNetwork, ...]:
    """The operator's CIDR list; ``ValueError`` naming a bad entry."""
    return tuple(ipaddress.ip_network(net, strict=False) for net in networks)


def _valid_networks(networks: list[str]) -> list[str]:
    parse_networks(networks)
    return networks


# A settings field of CIDRs, checked when the settings load (a typo fails at start, not per request).
NetworkList = Annotated[list[str], AfterValidator(_valid_networks)]


def address_allowed(address: IPAddress, networks: Sequence[IPNetwork]) -> bool:
    """A public address, or one inside a network the operator listed (IPv4-mapped IPv6 read as IPv4)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_global:
        return True
    return any(address in net for net in networks)


def refusal_as_written(host: str, networks: Sequence[IPNetwork], setting: str) -> str | None:
    """Why ``host`` as written may not be called (a local name, or an address literal neither public
    nor in ``networks``), or None: also None for any other name, which only resolving can judge."""
    if local_name(host):
        return f"{host!r} names this network; clients may call public addresses only"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if address_allowed(address, networks):
        return None
    return (
        f"{host} is not a public address; clients may call public addresses only "
        f"(the operator may list networks in {setting})"
    )


async def system_resolver(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for ``host`` (A and AAAA)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class PublicOnlyTransport(httpx.AsyncBaseTransport):
    """An httpx transport that dials only addresses clients may reach (see the module docstring)."""

    def __init__(
        self,
        networks: Sequence[str] = (),
        *,
        inner: httpx.AsyncBaseTransport | None = None,
        resolver: Resolver = system_resolver,
    ) -> None:
        self._networks = parse_networks(networks)
        self._inner = inner  # made on first use: most jobs never call a client URL
        self._resolve = resolver

    async def checked_address(self, host: str, port: int) -> str:
        """The address to dial for ``host``, or ``EgressRefused``."""
        why = refusal_as_written(host, self._networks, WORKER_NETWORKS_SETTING)
        if why is not None:
            raise EgressRefused(why)
        try:
            ipaddress.ip_address(host)
        except ValueError:
            pass
        else:
            return host  # an allowed address literal: nothing to resolve
        try:
            candidates = await self._resolve(host, port)
        except OSError as exc:
            raise httpx.ConnectError(f"cannot resolve {host!r}: {exc}") from exc
        if not candidates:
            raise httpx.ConnectError(f"cannot resolve {host!r}: no address")
        # Every address must pass: a name with one public and one private address could be dialled
        # at either, depending on the resolver's order.
        if not all(address_allowed(ipaddress.ip_address(a), self._networks) for a in candidates):
            raise EgressRefused(
                f"{host!r} resolves to a non-public address; clients may call public addresses only "
                f"(the operator may list networks in {WORKER_NETWORKS_SETTING})"
            )
        return candidates[0]

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        port = request.url.port or (443 if request.url.scheme == "https" else 80)
        address = await self.checked_address(host, port)
        if address != host:
            # Dial the checked address; the Host header (set from the URL when the request was built)
            # and the TLS server name stay the name.
            request.url = request.url.copy_with(host=address)
            if request.url.scheme == "https":
                request.extensions = {**request.extensions, "sni_hostname": host}
        if self._inner is None:
            self._inner = httpx.AsyncHTTPTransport()
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        if self._inner is not None:
            await self._inner.aclose()
