"""Keys limited to repos (auth/repos.py) and how the Gate hands their patterns out."""

import pytest

from pulsys.auth import gate as G
from pulsys.auth.keys import digest, key_id, new_key
from pulsys.auth.repos import MAX_PATTERNS, allows, compile_patterns, text_of


def test_patterns_match_repos_by_owner_name_and_type():
    c = compile_patterns(["acme/*", "datasets/team-a/*", "meta-llama/Llama-3*", "gpt2"])
    assert text_of(c) == ["acme/*", "datasets/team-a/*", "meta-llama/Llama-3*", "gpt2"]
    assert allows(c, "model", "acme/x") and allows(c, "dataset", "acme/x") and allows(c, "space", "acme/x")
    assert allows(c, "dataset", "team-a/d") and not allows(c, "model", "team-a/d")
    assert allows(c, "model", "meta-llama/Llama-3.1-8B") and not allows(c, "model", "meta-llama/Llama-2-7b")
    assert allows(c, "model", "gpt2") and not allows(c, "model", "gpt2-large")
    assert not allows(c, "model", "ACME/x")                 # repo ids are case-sensitive
    assert not allows(c, "model", "acmex/y") and not allows(c, "model", "other/acme")


@pytest.mark.parametrize("bad", [
    [], "acme/*", [""], ["  "], ["a/b/c/d"], ["models/"], ["acme/x y"],
    ["acme/%2F"], [7], ["x" * 201], ["acme/*"] * (MAX_PATTERNS + 1), ["buckets/acme/*"],
])
def test_bad_patterns_are_refused_with_a_reason(bad):
    with pytest.raises(ValueError) as e:
        compile_patterns(bad)
    assert "repo" in str(e.value)


def test_a_limited_key_is_never_a_plain_verdict_and_its_patterns_come_with_its_scope():
    free, limited = new_key()[0], new_key()[0]
    patterns = compile_patterns(["acme/*"])
    g = G.Gate({key_id(free): (digest(free), "read"),
                key_id(limited): (digest(limited), "read", patterns)})
    assert g.check("Bearer " + free) == ("read", None)
    assert g.check("Bearer " + limited) == ("read", patterns)
    assert g.check("Bearer " + limited) == ("read", patterns)      # remembered, same answer
    assert "Bearer " + free in g.verdicts and "Bearer " + limited not in g.verdicts
    assert g.scope("Bearer " + limited) == "read"
    g.load({key_id(free): (digest(free), "read")})                   # the limited key is revoked
    assert g.check("Bearer " + limited) is None and g.scope("Bearer " + limited) is None


def test_the_refusal_is_the_hubs_repo_not_found():
    raw = G.not_this_repo(True)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 404 ") and b"X-Error-Code: RepoNotFound\r\n" in head
    assert b"X-Error-Message: Repository not found\r\n" in head and body == b'{"error": "Repository not found"}'
    assert G.not_this_repo(False, False, True).startswith(b"HTTP/1.1 403 ")
    assert G.not_this_repo(False, False, True).endswith(b"\r\n\r\n")                # HEAD: no body
