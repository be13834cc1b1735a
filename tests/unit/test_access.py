"""auth/access.py: the Hub's answers as verdicts (upstream plane) and grants (reactors)."""

from pulsys.auth.access import (CONTENT, META, PUBLIC, Grants, Verdicts, classify, digest,
                                need_of)
from pulsys.model import target as T


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_what_an_answer_says_of_the_token_that_asked():
    assert classify(200, {}) is True and classify(206, {}) is True and classify(304, {}) is True
    assert classify(302, {"Location": "https://cdn.example/x"}) is True
    assert classify(307, {"Location": "/new/name/resolve/main/x"}) is None   # asked again under its name
    assert classify(401, {"X-Error-Code": "GatedRepo"}) is False
    assert classify(403, {"X-Error-Code": "GatedRepo"}) is False
    assert classify(401, {}) is False                                       # an invalid token
    assert classify(404, {"X-Error-Code": "RepoNotFound"}) is False
    assert classify(404, {"X-Error-Code": "EntryNotFound"}) is True         # it saw the repo
    assert classify(404, {"X-Error-Code": "RevisionNotFound"}) is True
    assert classify(429, {}) is None and classify(503, {}) is None


def test_routes_and_levels():
    assert need_of(T.RESOLVE) == CONTENT
    assert need_of(T.API_INFO) == need_of(T.API_TREE) == need_of(T.API_PATHS_INFO) == META
    assert need_of(T.API_OTHER) is None and need_of(T.LOCAL) is None


def test_digests_stand_for_tokens():
    d = digest("Bearer hf_" + "a" * 34)
    assert len(d) == 16 and "hf_" not in d and d != digest("Bearer hf_" + "b" * 34)
    assert digest("") == digest(None) == PUBLIC


def test_a_yes_lasts_the_ttl_then_may_serve_only_stale_copies():
    clock = Clock()
    v = Verdicts(10, clock)
    alice = digest("Bearer a")
    assert v.check(alice, "model", "o/g", CONTENT, clock()) == ("ask", False)
    grant = v.allow(alice, "model", "o/g", CONTENT)
    assert grant == (False, "model", "o/g", 110.0)
    assert v.check(alice, "model", "o/g", CONTENT, clock()) == ("yes", grant)
    assert v.check(alice, "model", "o/g", META, clock()) == ("yes", None)   # CONTENT implies META
    assert v.check(digest("Bearer b"), "model", "o/g", CONTENT, clock())[0] == "ask"
    clock.t = 111.0
    assert v.check(alice, "model", "o/g", CONTENT, clock()) == ("ask", True)


def test_a_no_replays_the_hubs_answer_and_a_hidden_repo_hides_its_files_too():
    clock = Clock()
    v = Verdicts(10, clock)
    bob = digest("Bearer b")
    v.refuse(bob, "model", "o/p", META, "404 RepoNotFound")
    assert v.check(bob, "model", "o/p", META, clock()) == ("no", "404 RepoNotFound")
    assert v.check(bob, "model", "o/p", CONTENT, clock()) == ("no", "404 RepoNotFound")
    v.refuse(bob, "model", "o/g", CONTENT, "403 GatedRepo")
    assert v.check(bob, "model", "o/g", CONTENT, clock()) == ("no", "403 GatedRepo")
    assert v.check(bob, "model", "o/g", META, clock()) == ("ask", False)   # gated metadata is public
    v.allow(bob, "model", "o/g", CONTENT)                                  # access granted since
    assert v.check(bob, "model", "o/g", CONTENT, clock())[0] == "yes"
    clock.t = 120.0
    assert v.check(bob, "model", "o/p", META, clock()) == ("ask", False)   # a no expires too


def test_a_public_yes_holds_for_everyone_but_a_public_no_only_for_anonymous():
    clock = Clock()
    v = Verdicts(10, clock)
    v.allow(PUBLIC, "model", "o/m", CONTENT)
    assert v.check(digest("Bearer x"), "model", "o/m", CONTENT, clock())[1][0] is True
    v.refuse(PUBLIC, "dataset", "o/g", CONTENT, "401 GatedRepo")
    assert v.check(PUBLIC, "dataset", "o/g", CONTENT, clock()) == ("no", "401 GatedRepo")
    assert v.check(digest("Bearer x"), "dataset", "o/g", CONTENT, clock())[0] == "ask"
    assert v.check(PUBLIC, "model", "o/g", CONTENT, clock())[0] == "ask"   # another repo type


def test_grants_in_a_reactor():
    g = Grants()
    assert g.until("Bearer a", "model", "o/g", 100.0) == 0.0
    g.learn("Bearer a", (False, "model", "o/g", 110.0))
    assert g.until("Bearer a", "model", "o/g", 100.0) == 110.0
    assert g.until("Bearer b", "model", "o/g", 100.0) == 0.0
    assert g.until("Bearer a", "model", "o/g", 110.0) == 0.0              # expired
    g.learn("Bearer b", (True, "model", "o/pub", 120.0))                  # public: for everyone
    assert g.until(None, "model", "o/pub", 100.0) == 120.0
    assert g.until("Bearer z", "model", "o/pub", 100.0) == 120.0


def test_tables_stay_bounded():
    from pulsys.auth import access
    g = Grants()
    for i in range(access.MAX_GRANTS + 10):
        g.learn("Bearer %d" % i, (False, "model", "o/r", 1.0))
    assert len(g.table) <= access.MAX_GRANTS
    clock = Clock()
    v = Verdicts(10, clock)
    old, access.MAX_VERDICTS = access.MAX_VERDICTS, 100
    try:
        for i in range(250):
            v.allow(digest("Bearer %d" % i), "model", "o/r", META)
        assert len(v) <= 100
        assert v.check(digest("Bearer 249"), "model", "o/r", META, clock())[0] == "yes"
    finally:
        access.MAX_VERDICTS = old
