"""The token registry: CSPRNG tokens, resolved to their own run only, revoked for good."""

from __future__ import annotations

import base64

from hypothesis import given, strategies as st

from actors.subagents import TokenRegistry


def test_a_token_resolves_to_the_run_it_was_minted_for_and_no_other():
    tokens: TokenRegistry[str] = TokenRegistry()
    a, b = tokens.mint("run-a"), tokens.mint("run-b")
    assert a != b
    assert tokens.resolve(a) == "run-a" and tokens.resolve(b) == "run-b"
    assert len(tokens) == 2


def test_tokens_carry_at_least_122_bits_and_are_url_safe():
    tokens: TokenRegistry[int] = TokenRegistry()
    minted = {tokens.mint(i) for i in range(200)}
    assert len(minted) == 200
    for token in minted:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        assert len(raw) * 8 >= 256
        assert token.replace("-", "").replace("_", "").isalnum()


def test_revoked_and_never_minted_tokens_resolve_alike():
    tokens: TokenRegistry[str] = TokenRegistry()
    token = tokens.mint("run")
    assert tokens.revoke(token)
    assert tokens.resolve(token) is None
    assert tokens.resolve("never-minted") is None
    assert not tokens.revoke(token)  # idempotent
    assert len(tokens) == 0


def test_junk_never_resolves():
    tokens: TokenRegistry[str] = TokenRegistry()
    tokens.mint("run")
    for junk in ("", "x" * 10_000, None, 42, "\udcff"):
        assert tokens.resolve(junk) is None  # type: ignore[arg-type]


@given(st.text(max_size=300))
def test_no_guess_resolves(guess):
    tokens: TokenRegistry[str] = TokenRegistry()
    token = tokens.mint("run")
    assert tokens.resolve(guess) == ("run" if guess == token else None)
