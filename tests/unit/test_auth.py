"""API key format, the Bearer parser, and the in-memory Gate the data plane checks."""

import json
import re
import time

from pulsys.auth import gate as G
from pulsys.auth.keys import OLD_PREFIX, PREFIX, bearer, digest, key_id, matches, new_key

# llama.cpp's `-hf` download sends a token only when it has this shape (hf_ and then at
# least 34 letters and digits; its common/hf-cache.cpp), and so does the Hub's own format
HF_TOKEN_SHAPE = re.compile(r"\Ahf_[A-Za-z0-9]{34,}\Z")


def old_format_key():
    """A key as pulsys made them before the hf_ format: pulsys_<id>_<secret>."""
    kid = "5d1c0e9a7b31"
    return "%s%s_%s" % (OLD_PREFIX, kid, "A1b2" * 10 + "xyz"), kid


def test_new_keys_have_the_documented_shape_and_are_unique():
    seen = set()
    for _ in range(200):
        key, kid, dig = new_key()
        assert key.startswith("hf_pulsys") and key_id(key) == kid and len(kid) == 12
        assert key[len(PREFIX):len(PREFIX) + 12] == kid and len(key) == 64
        secret = key[len(PREFIX) + 12:]
        assert len(secret) == 43 and secret.isalnum()
        assert HF_TOKEN_SHAPE.match(key), key
        assert dig == digest(key) and len(dig) == 64 and matches(key, dig)
        seen.add(key)
    assert len(seen) == 200


def test_keys_made_before_the_hf_format_keep_working():
    key, kid = old_format_key()
    assert key_id(key) == kid
    g = G.Gate({kid: (digest(key), "read")})
    assert g.scope("Bearer " + key) == "read"
    assert G.Gate.reason("Bearer " + key[:-1] + "Q") == G.INVALID


def test_malformed_keys_have_no_id():
    key, kid, _ = new_key()
    old, old_kid = old_format_key()
    real_hf_token = "hf_" + "aBcD1234" * 4 + "xy"          # 37 characters, as the Hub makes them
    for bad in ("", "pulsys_", "hf_abcdef", "hf_pulsys", real_hf_token, key[:-1], key + "x",
                key.replace("hf_pulsys", "hf_pulsis"), PREFIX + "ABCDEF012345" + key[-43:],
                PREFIX + "zzzzzzzzzzzz" + key[-43:],
                old.replace("pulsys_", "pulsis_"), OLD_PREFIX + "ABCDEF012345_x",
                OLD_PREFIX + old_kid, OLD_PREFIX + old_kid + "-secret", OLD_PREFIX + "zzzzzzzzzzzz_secret"):
        assert key_id(bad) is None, bad
    assert not matches(key + "x", digest(key))
    assert G.Gate.reason("Bearer " + real_hf_token) == G.NOT_PULSYS


def test_bearer_takes_the_credential_of_any_case_scheme():
    assert bearer("Bearer abc") == "abc" and bearer("bearer   abc ") == "abc" and bearer("BEARER abc") == "abc"
    for bad in (None, "", "Bearer", "Bearer   ", "Basic dXNlcjpwYXNz", "abc", "Token abc"):
        assert bearer(bad) is None, bad


def table_of(*pairs):
    return {key_id(k): (digest(k), scope) for k, scope in pairs}


def test_gate_accepts_active_keys_and_remembers_only_accepted_headers():
    (a, _, _), (b, _, _) = new_key(), new_key()
    g = G.Gate(table_of((a, "read"), (b, "admin")))
    assert g.scope("Bearer " + a) == "read" and g.scope("bearer " + b) == "admin"
    assert set(g.verdicts) == {"Bearer " + a, "bearer " + b}
    other, _, _ = new_key()
    for refused, why in ((None, G.MISSING), ("", G.MISSING), ("Basic eDp5", G.NOT_BEARER),
                         ("Bearer " + other, G.INVALID), ("Bearer " + a[:-1] + ("1" if a.endswith("0") else "0"), G.INVALID),
                         ("Bearer hf_notours", G.NOT_PULSYS)):
        assert g.scope(refused) is None and g.reason(refused) == why, refused
    assert len(g.verdicts) == 2            # refusals are not remembered


def test_loading_a_table_without_a_key_revokes_it_at_the_next_check():
    (a, _, _), (b, _, _) = new_key(), new_key()
    g = G.Gate(table_of((a, "read"), (b, "read")))
    assert g.scope("Bearer " + a) == "read" and "Bearer " + a in g.verdicts
    g.load(table_of((b, "read")))
    assert "Bearer " + a not in g.verdicts and g.scope("Bearer " + a) is None
    assert g.scope("Bearer " + b) == "read"


class LoadsDuringLookup(dict):
    """A key table whose lookup lets another thread's load() land in the middle of a
    check (after the table is read, before the verdict is stored): the interleaving the
    GIL allows between two bytecodes of check()."""

    def __init__(self, rows, gate, new_table):
        super().__init__(rows)
        self.gate, self.new_table = gate, new_table

    def get(self, kid, default=None):
        row = super().get(kid, default)
        self.gate.load(self.new_table)
        return row


def test_a_load_during_a_check_cannot_leave_a_revoked_key_accepted():
    for scope_row in ((), (("o/*",),)):             # keys for every repo, and limited keys
        (a, _, _), (b, _, _) = new_key(), new_key()
        g = G.Gate()
        rows = {key_id(a): (digest(a), "read") + scope_row}
        g.table = LoadsDuringLookup(G._table(rows), g, table_of((b, "read")))   # a revoked meanwhile
        assert g.check("Bearer " + a) is not None    # the check that raced the load
        assert "Bearer " + a not in g.verdicts and "Bearer " + a not in g.limited
        assert g.check("Bearer " + a) is None         # the next request is refused


def test_verdicts_are_bounded():
    keys = [new_key()[0] for _ in range(5)]
    g = G.Gate(table_of(*[(k, "read") for k in keys]))
    old = G.MAX_VERDICTS
    G.MAX_VERDICTS = 3
    try:
        for k in keys:
            assert g.scope("Bearer " + k) == "read"
            assert len(g.verdicts) <= 3
    finally:
        G.MAX_VERDICTS = old


def test_refusal_is_an_hf_style_401():
    raw = G.refusal(G.MISSING, keep_alive=True)
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 401 Unauthorized"
    h = dict(line.split(": ", 1) for line in lines[1:])
    assert h["X-Error-Message"] == G.MESSAGES[G.MISSING] == json.loads(body)["error"]
    assert h["WWW-Authenticate"].startswith("Bearer") and h["Connection"] == "keep-alive"
    assert int(h["Content-Length"]) == len(body)
    assert "HF_TOKEN" in json.loads(body)["error"]
    assert G.refusal(G.INVALID, False, True).endswith(b"Connection: close\r\n\r\n")   # HEAD: no body


def test_checking_a_key_costs_microseconds():
    """What the reactor pays: a remembered header is one dict lookup; a new one a parse
    and one sha256 (pulsys/auth/keys.py says why no slow hash is needed)."""
    key, _, _ = new_key()
    g = G.Gate(table_of((key, "read")))
    header = "Bearer " + key
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        g.verdicts.clear()
        g.scope(header)
    fresh = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    verdicts = g.verdicts
    for _ in range(n):
        header in verdicts
    remembered = (time.perf_counter() - t0) / n
    assert fresh < 50e-6, fresh
    assert remembered < 2e-6, remembered
