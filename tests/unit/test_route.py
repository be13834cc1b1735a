import pytest

from pulsys.model import target as T
from pulsys.model.request import RequestHead
from pulsys.route import route

SHA = "0123456789abcdef0123456789abcdef01234567"


def r(method, target):
    h = RequestHead()
    h.method = method
    h.target = target
    h.path, _, h.query = target.partition("?")
    return route(h)


@pytest.mark.parametrize("url,rtype,repo,rev,path", [
    ("/gpt2/resolve/main/config.json", "model", "gpt2", "main", "config.json"),
    ("/org/name/resolve/main/config.json", "model", "org/name", "main", "config.json"),
    ("/org/name/resolve/refs%2Fpr%2F1/a/b.bin", "model", "org/name", "refs/pr/1", "a/b.bin"),
    ("/org/name/resolve/%s/model.safetensors" % SHA, "model", "org/name", SHA, "model.safetensors"),
    ("/datasets/org/ds/resolve/main/data/train.parquet", "dataset", "org/ds", "main", "data/train.parquet"),
    ("/datasets/squad/resolve/v1.0/README.md", "dataset", "squad", "v1.0", "README.md"),
    ("/spaces/org/app/resolve/main/app.py", "space", "org/app", "main", "app.py"),
    ("/org/name/resolve/main/dir%20with%20space/f.txt", "model", "org/name", "main", "dir with space/f.txt"),
])
def test_resolve_shapes(url, rtype, repo, rev, path):
    t = r("GET", url)
    assert (t.kind, t.rtype, t.repo, t.rev, t.path) == (T.RESOLVE, rtype, repo, rev, path)
    assert r("HEAD", url).kind == T.RESOLVE


def test_upstream_path_reencodes_revision_and_keeps_slashes():
    t = r("GET", "/org/name/resolve/refs%2Fpr%2F1/a/b.bin")
    assert t.upstream_path == "/org/name/resolve/refs%2Fpr%2F1/a/b.bin"


def test_resolve_cache_maps_to_the_same_target_as_resolve_at_the_commit():
    a = r("GET", "/api/resolve-cache/models/org/name/%s/sub/config.json?%%2Forg=&etag=%%22x%%22" % SHA)
    b = r("GET", "/org/name/resolve/%s/sub/config.json" % SHA)
    assert (a.kind, a.rtype, a.repo, a.rev, a.path) == (b.kind, b.rtype, b.repo, b.rev, b.path)
    assert a.upstream_path.startswith("/api/resolve-cache/") and a.query.startswith("%2Forg")
    one = r("GET", "/api/resolve-cache/datasets/squad/%s/README.md" % SHA)
    assert (one.rtype, one.repo, one.path) == ("dataset", "squad", "README.md")


@pytest.mark.parametrize("url,kind,repo,rev,path", [
    ("/api/models/org/name", T.API_INFO, "org/name", "", ""),
    ("/api/models/gpt2", T.API_INFO, "gpt2", "", ""),
    ("/api/models/org/name/revision/main", T.API_INFO, "org/name", "main", ""),
    ("/api/datasets/org/ds/revision/refs%2Fconvert%2Fparquet", T.API_INFO, "org/ds", "refs/convert/parquet", ""),
    ("/api/models/org/name/tree/%s?recursive=true&expand=false" % SHA, T.API_TREE, "org/name", SHA, ""),
    ("/api/datasets/org/ds/tree/main/data", T.API_TREE, "org/ds", "main", "data"),
])
def test_api_shapes(url, kind, repo, rev, path):
    t = r("GET", url)
    assert (t.kind, t.repo, t.rev, t.path) == (kind, repo, rev, path)


def test_paths_info_is_post_only():
    assert r("POST", "/api/models/org/name/paths-info/main").kind == T.API_PATHS_INFO
    t = r("GET", "/api/models/org/name/paths-info/main")
    assert t.kind == T.REJECT and t.status == 405


def test_other_api_get_is_proxied_and_writes_are_refused():
    assert r("GET", "/api/whoami-v2").kind == T.API_OTHER
    assert r("GET", "/api/models/org/name/refs").kind in (T.API_OTHER, T.API_INFO)
    t = r("POST", "/api/repos/create")
    assert t.kind == T.REJECT and t.status == 405


@pytest.mark.parametrize("url", [
    "/org/name/resolve/main/../etc/passwd",
    "/org/name/resolve/main/a/%2e%2e/b",
    "/org/name/resolve/main/a%00b",
    "/org/name/resolve/main/a%5cb",
    "/org/name/resolve/main/a//b",
    "/org/name/resolve/main/%ff%fe",
])
def test_unsafe_paths_are_400(url):
    t = r("GET", url)
    assert t.kind == T.REJECT and t.status == 400


def test_unknown_paths_are_404_and_methods_405():
    t = r("GET", "/")
    assert t.kind == T.REJECT and t.status == 404
    assert r("GET", "/org/name/blob/main/x").status == 404
    assert r("DELETE", "/org/name/resolve/main/x").status == 405


def test_local_routes():
    assert r("GET", "/healthz").kind == T.LOCAL
    assert r("GET", "/api/agent-harnesses").path == "agent-harnesses"


@pytest.mark.parametrize("url", [
    "/org/name/resolve/main/a%2F..%2F..%2Fetc%2Fpasswd",     # decoded "/" cannot carry a ".."
    "/org/name/resolve/main/%2Fetc%2Fpasswd",                # nor start at the root
    "/org/name/resolve/main/a%2F%2Fb",
    "/org/name/resolve/main/a%2F.%2Fb",
    "/org/name/resolve/main/%2e%2e",
    "/org/name/resolve/main/%2E%2E/x",
    "/org/name/resolve/main/a%5C..%5Cb",
    "/org/name/resolve/main/a%0D%0AX-Evil:%201",
    "/org/name/resolve/main/a%C2%85b",                       # NEL, a C1 control
    "/org/name/resolve/..%2F..%2Fx/f",                        # revision
    "/org/name/resolve/%2Fmain/f",
    "/org/..%2Fother/resolve/main/f",                         # repo ids: Hub syntax only
    "/org%2Fname/resolve/main/f",
    "/org/na%00me/resolve/main/f",
    "/-org/name/resolve/main/f",
    "/org/na--me/resolve/main/f",
    "/api/models/org/..%2Fx/revision/main",
    "/api/models/org/name/tree/main/a%2F..%2F..%2Fb",
    "/api/resolve-cache/models/org/name/%s/a%%2F..%%2Fb" % SHA,
    "/api/resolve-cache/models/o%%2Fx/name/%s/f" % SHA,
    "/api/whoami-v2/%2e%2e/%2e%2e/admin",                     # passed-through API paths
    "/api/x/./y",
    "/api/x/a%00b",
])
def test_traversal_in_every_part_is_400(url):
    t = r("GET", url)
    assert (t.kind, t.status) == (T.REJECT, 400), t


def test_a_decoded_slash_in_a_file_name_is_the_same_file_as_a_literal_one():
    a, b = r("GET", "/org/name/resolve/main/a%2Fb.bin"), r("GET", "/org/name/resolve/main/a/b.bin")
    assert a.path == b.path == "a/b.bin" and a.upstream_path == b.upstream_path


def test_upstream_paths_are_rebuilt_from_what_the_key_names():
    # the client's spelling never reaches upstream for a cached route: an encoding that
    # upstream read differently would otherwise be cached under this key
    t = r("GET", "/api/models/or%67/name/revision/ma%69n")
    assert (t.repo, t.rev, t.upstream_path) == ("org/name", "main", "/api/models/org/name/revision/main")
    t = r("GET", "/api/datasets/org/ds/tree/refs%2Fconvert%2Fparquet/da%74a?recursive=true")
    assert t.upstream_path == "/api/datasets/org/ds/tree/refs%2Fconvert%2Fparquet/data"
    assert t.query == "recursive=true"
    t = r("GET", "/api/models/gpt%32")
    assert (t.kind, t.repo, t.upstream_path) == (T.API_INFO, "gpt2", "/api/models/gpt2")
    t = r("GET", "/api/resolve-cache/models/org/name/%s/sub%%2Fc%%6Fnfig.json?x=1" % SHA)
    assert t.upstream_path == "/api/resolve-cache/models/org/name/%s/sub/config.json" % SHA
    assert t.query == "x=1"


@pytest.mark.parametrize("method,url,allow", [
    ("DELETE", "/org/name/resolve/main/x", "GET, HEAD"),
    ("PUT", "/api/resolve-cache/models/org/name/%s/f" % SHA, "GET, HEAD"),
    ("GET", "/api/models/org/name/paths-info/main", "POST"),
    ("OPTIONS", "/api/models/org/name/revision/main", "GET, HEAD"),
    ("POST", "/api/repos/create", "GET, HEAD"),
    ("POST", "/healthz", "GET, HEAD"),
])
def test_405_names_the_allowed_methods(method, url, allow):
    t = r(method, url)
    assert (t.kind, t.status, t.allow) == (T.REJECT, 405, allow)


@pytest.mark.parametrize("method", ["FOO", "get", "PROPFIND", "M-SEARCH", "BREW"])
def test_unknown_methods_are_501_on_every_path(method):
    for url in ("/org/name/resolve/main/x", "/healthz", "/api/models/org/name", "/nope"):
        t = r(method, url)
        assert (t.kind, t.status) == (T.REJECT, 501)
