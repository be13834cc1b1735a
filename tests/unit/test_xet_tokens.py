"""CAS tokens and signed xorb URLs of --xet facade (pulsys/upstream/xet_tokens.py)."""

from pulsys.upstream.xet_tokens import CasToken, XetTokens, derive_key

NOW = 1_800_000_000


def _tokens(secret=b"s" * 32, now=NOW):
    return XetTokens(derive_key(secret), lambda: now)


def test_a_minted_token_checks_back_to_its_holder_repo_and_expiry():
    t = _tokens()
    tok = t.check("Bearer " + t.mint("abcd", "model", "acme/gated", "main", NOW + 60))
    assert isinstance(tok, CasToken)
    assert (tok.who, tok.rtype, tok.repo, tok.rev, tok.expires) == ("abcd", "model", "acme/gated", "main", NOW + 60)


def test_tokens_are_refused_when_expired_forged_or_from_another_secret():
    t = _tokens()
    token = t.mint("abcd", "model", "acme/x", "main", NOW + 60)
    assert "expired" in _tokens(now=NOW + 61).check("Bearer " + token)
    assert "signature" in _tokens(secret=b"o" * 32).check("Bearer " + token)
    payload, mac = token[len("pxet1."):].split(".")
    other = t.mint("abcd", "model", "acme/private", "main", NOW + 60)
    # the payload of one token with the MAC of another: another repo is not reachable
    assert "signature" in t.check("Bearer pxet1.%s.%s" % (other.split(".")[1], mac))
    assert isinstance(t.check(""), str) and isinstance(t.check("Bearer hf_abc"), str)
    assert isinstance(t.check("Bearer pxet1.!!.x"), str)


def test_xorb_urls_sign_the_exact_range_and_expire():
    t = _tokens()
    path = t.xorb_path("ab" * 32, 3, 9, NOW + 10)
    assert path.startswith("/cas/xorbs/%s/3-9?" % ("ab" * 32))
    query = path.split("?", 1)[1]
    assert t.xorb_ok("ab" * 32, 3, 9, query) is None
    assert t.xorb_ok("ab" * 32, 3, 10, query) is not None         # another range
    assert t.xorb_ok("cd" * 32, 3, 9, query) is not None          # another xorb
    assert "expired" in _tokens(now=NOW + 11).xorb_ok("ab" * 32, 3, 9, query)
    assert t.xorb_ok("ab" * 32, 3, 9, "e=x&s=y") is not None
    assert derive_key(b"s" * 32) != b"s" * 32
