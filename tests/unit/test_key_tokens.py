"""upstream/key_tokens.py: what the Hub is sent for a client's pulsys key."""

from pulsys.auth.keys import new_key
from pulsys.auth.sealed import Unsealable
from pulsys.db.database import DatabaseError
from pulsys.log import get_logger
from pulsys.upstream.key_tokens import KeyTokens


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_keys_token_is_read_once_per_refresh_and_kept_while_the_store_is_down():
    key, kid, _ = new_key()
    store = {kid: "hf_alice"}
    reads = []

    def token_of(k):
        reads.append(k)
        if store.get("down"):
            raise DatabaseError("store down")
        return store.get(k)

    clock = Clock()
    kt = KeyTokens(token_of, 2.0, get_logger("test"), clock)
    assert kt.upstream_auth("Bearer " + key) == "Bearer hf_alice"
    assert kt.upstream_auth("Bearer " + key) == "Bearer hf_alice" and reads == [kid]
    store[kid] = None                       # removed: seen after the refresh
    clock.now += 2.5
    assert kt.upstream_auth("Bearer " + key) == "" and len(reads) == 2
    store[kid], store["down"] = "hf_new", True
    clock.now += 2.5
    assert kt.upstream_auth("Bearer " + key) == ""          # the last one read: none
    other, _, _ = new_key()
    assert kt.upstream_auth("Bearer " + other) == ""        # never read: anonymous


def test_an_unsealable_token_and_a_header_that_is_no_key_ask_anonymously():
    key, _, _ = new_key()

    def token_of(k):
        raise Unsealable("another secret")

    kt = KeyTokens(token_of, 1.0, get_logger("test"), Clock())
    assert kt.upstream_auth("Bearer " + key) == ""
    assert kt.upstream_auth("Bearer hf_" + "a" * 34) == "" and kt.upstream_auth("") == ""
