"""Whether an address keeps a server on this machine: the one rule the preview, the
publisher and the Ray cluster use to decide whether to warn or ask for a token."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach an address bound on `host`: an IPv4
    address in 127.0.0.0/8, ``::1``, an IPv4-mapped ``::ffff:127.x.y.z`` (IPv6 ones
    with or without brackets), or the name ``localhost``. Any other name may resolve
    to any address, so it is taken as reachable from elsewhere."""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
    except ValueError:
        return False
    # Python 3.11's `is_loopback` is False for a mapped 127.x (fixed in 3.13).
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback
