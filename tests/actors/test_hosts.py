"""The one rule for "this machine": binds without auth, model servers without an API key."""

import pytest

from actors.hosts import is_loopback_host


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.8.9.10", "::1", "[::1]"])
def test_localhost_and_loopback_addresses_are_this_machine(host: str) -> None:
    assert is_loopback_host(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.1", "example.com", "127.0.0.1.nip.io", "LOCALHOST.evil",
                                  "::ffff:127.0.0.1x", ""])
def test_other_hosts_are_not_whatever_they_resolve_to(host: str) -> None:
    assert not is_loopback_host(host)
