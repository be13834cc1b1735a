from pulsys.model import target as T
from pulsys.model.key import cache_key, rev_key, target_key
from pulsys.model.request import RequestHead
from pulsys.route import route

SHA = "0123456789abcdef0123456789abcdef01234567"


def t(target, method="GET"):
    h = RequestHead()
    h.method, h.target = method, target
    h.path, _, h.query = target.partition("?")
    return route(h)


def test_key_is_the_same_for_resolve_and_resolve_cache_whatever_the_query():
    a = target_key(t("/org/n/resolve/%s/f.json" % SHA))
    b = target_key(t("/api/resolve-cache/models/org/n/%s/f.json?%%2Forg=&etag=%%22e%%22" % SHA))
    c = target_key(t("/api/resolve-cache/models/org/n/%s/f.json" % SHA))
    assert a == b == c


def test_key_separates_repo_types_revisions_and_paths():
    keys = {target_key(t(u)) for u in (
        "/org/n/resolve/main/f", "/datasets/org/n/resolve/main/f", "/spaces/org/n/resolve/main/f",
        "/org/n/resolve/v1/f", "/org/n/resolve/main/g", "/org/m/resolve/main/f")}
    assert len(keys) == 6


def test_key_for_a_symbolic_revision_replaced_by_its_commit_equals_the_commit_key():
    assert target_key(t("/org/n/resolve/main/f"), SHA) == target_key(t("/org/n/resolve/%s/f" % SHA))


def test_key_never_contains_credentials():
    h = RequestHead()
    h.method, h.target, h.path, h.authorization = "GET", "/o/n/resolve/main/f", "/o/n/resolve/main/f", "Bearer hf_secret"
    assert "secret" not in target_key(route(h))


def test_rev_keys_and_cache_keys_do_not_collide():
    assert rev_key("model", "o/n", "main") != cache_key(T.RESOLVE, "model", "o/n", "main")


def test_fields_containing_the_separator_never_share_a_key():
    # git ref names and file names may both contain "|" and "%"
    a = target_key(t("/org/n/resolve/a%7Cb/c"))       # revision "a|b", file "c"
    b = target_key(t("/org/n/resolve/a/b%7Cc"))       # revision "a", file "b|c"
    c = target_key(t("/org/n/resolve/a%257Cb/c"))     # revision "a%7Cb", file "c"
    assert (t("/org/n/resolve/a%7Cb/c").rev, t("/org/n/resolve/a/b%7Cc").path) == ("a|b", "b|c")
    assert len({a, b, c}) == 3
    # joined unescaped, both would read "3|model|o/n|main|||x"
    assert cache_key(T.API_TREE, "model", "o/n", "main", "", "|x") != \
        cache_key(T.API_TREE, "model", "o/n", "main", "|", "x")


def test_plain_keys_keep_their_spelling():
    assert target_key(t("/org/n/resolve/main/dir/f.json")) == "1|model|org/n|main|dir/f.json|"
