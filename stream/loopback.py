"""What keeps a run's servers to the peers they are for: whether an address keeps a
server on this machine (`is_loopback`, the one rule the preview, the publisher and the
Ray cluster use to decide whether to warn or ask for a token), the connections a
server keeps at once (`MAX_CONNECTIONS`, the preview's and the publisher's), and
refusals warned about once (`WarnOnce`), so a peer repeating one cannot flood the log."""

from __future__ import annotations

import ipaddress
import logging

# Connections a server of the run keeps at once (preview pages and scripts, publisher
# subscribers): one more is closed as soon as it is accepted, so that idle peers
# cannot take the descriptors the run's outputs need. Far below the usual 1,024.
MAX_CONNECTIONS = 64


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


class WarnOnce:
    """A count of what a server refuses, with a warning the first time only.

    Args:
        logger: where the warning goes.
        message: the warning, %-formatted with `args`.

    Attributes:
        count: refusals so far.
    """

    def __init__(self, logger: logging.Logger, message: str, *args: object) -> None:
        self._logger = logger
        self._message = message
        self._args = args
        self.count = 0

    def __call__(self) -> None:
        """Count one refusal; warn if it is the first."""
        if self.count == 0:
            self._logger.warning(self._message, *self._args)
        self.count += 1
