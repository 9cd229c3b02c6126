"""The one loopback rule of the preview, the publisher and the Ray cluster, on the
addresses where the preview's and the publisher's former copies disagreed or erred."""

import pytest

from sleap_live.stream import preview, publish
from sleap_live.stream.loopback import is_loopback
from sleap_live.stream.many import cluster


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.255.0.9", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        # IPv4-mapped loopback: both copies took it as exposed.
        ("::ffff:127.0.0.1", True),
        ("[::ffff:127.3.2.1]", True),
        # A name that only starts like 127/8 resolves anywhere: both copies took it as loopback.
        ("127.example.com", False),
        ("::ffff:10.0.0.1", False),
        # An interface name is ZeroMQ's alone (the publisher's copy took it as an address).
        ("lo", False),
        ("0.0.0.0", False),
        ("::", False),
        ("*", False),
        ("", False),
    ],
)
def test_one_rule_says_which_addresses_stay_on_this_machine(host, loopback):
    assert is_loopback(host) == loopback


def test_the_preview_the_publisher_and_the_cluster_share_the_rule():
    assert preview.is_loopback is publish.is_loopback is cluster.is_loopback is is_loopback


@pytest.mark.parametrize(
    ("endpoint", "warned"),
    [
        ("tcp://lo:5555", False),
        ("tcp://[::ffff:127.0.0.1]:5555", False),
        ("tcp://127.example.com:5555", True),
    ],
)
def test_the_publisher_warns_by_the_shared_rule_and_knows_the_loopback_interface(endpoint, warned):
    assert (publish.exposure_warning(endpoint) is not None) == warned
