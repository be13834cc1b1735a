"""The fake Hub answers like the real Hub (hf-protocol.md §3-§5); loopback only, each test bounded."""

import gzip
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from pulsys.testing.fake_hub import FakeHub, git_blob_sha1, sha256_hex

T = 5  # seconds: timeout of every client call
TOKEN = "hf_good_token"
CONFIG = json.dumps({"model_type": "fake", "hidden_size": 8}).encode()
WEIGHTS = bytes(range(256)) * 1024  # 256 KiB, LFS by suffix
TEXT = b"hello world\n" * 500
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "run_fake_hub.py"


@pytest.fixture
def hub():
    with FakeHub(tree_page_size=2, token=TOKEN) as h:
        h.sha = h.add_repo("org/name", files={
            "config.json": CONFIG, "model.safetensors": WEIGHTS, "notes.txt": TEXT,
            "sub/a.json": b"{}", "sub/deep/b.bin": b"\x00\x01"}, lfs={"model.safetensors"})
        yield h
        assert h.server_errors == []


def url_path(hub, path, **kw):
    return requests.get(hub.url + path, timeout=T, **kw)


def head(hub, path, **kw):
    return requests.head(hub.url + path, timeout=T, allow_redirects=False, **kw)


def cdn_location(hub, path="/org/name/resolve/main/model.safetensors"):
    r = head(hub, path)
    assert r.status_code == 302
    return r.headers["Location"]


def raw_get(netloc, target, headers=(), settle=0.0):
    """One GET with Connection: close on a plain socket: (head, body, error)."""
    host, port = netloc.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=T) as s:
        lines = ["GET %s HTTP/1.1" % target, "Host: %s" % netloc, "Connection: close", *headers, "", ""]
        s.sendall("\r\n".join(lines).encode())
        time.sleep(settle)
        data, error = b"", None
        try:
            while chunk := s.recv(65536):
                data += chunk
        except OSError as exc:
            error = exc
    head_bytes, _, body = data.partition(b"\r\n\r\n")
    return head_bytes.decode("latin-1"), body, error


# -- ids -----------------------------------------------------------------------


def test_content_ids_match_git_and_sha256():
    assert git_blob_sha1(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"  # `git hash-object`
    assert sha256_hex(b"") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_refuses_non_loopback_addresses():
    with pytest.raises(ValueError):
        FakeHub(host="0.0.0.0")


# -- /resolve: regular files (§3, §4.1) ----------------------------------------


def test_regular_file_is_a_relative_307_to_resolve_cache(hub):
    r = head(hub, "/org/name/resolve/main/config.json")
    assert r.status_code == 307
    assert r.headers["X-Repo-Commit"] == hub.sha
    assert r.headers["Location"] == (
        "/api/resolve-cache/models/org/name/%s/config.json?%%2Forg%%2Fname%%2Fresolve%%2Fmain%%2Fconfig.json="
        "&etag=%%22%s%%22" % (hub.sha, git_blob_sha1(CONFIG)))
    for target in (r.headers["Location"], r.headers["Location"].split("?")[0]):  # 0.36.2 drops the query
        got = url_path(hub, target, headers={"Accept-Encoding": "identity"})
        assert got.status_code == 200 and got.content == CONFIG
        assert got.headers["ETag"] == '"%s"' % git_blob_sha1(CONFIG)
        assert got.headers["X-Repo-Commit"] == hub.sha
        assert got.headers["Content-Length"] == str(len(CONFIG))
        assert got.headers["Accept-Ranges"] == "bytes"
        assert 'filename="config.json"' in got.headers["Content-Disposition"]


def test_pr_ref_one_segment_and_dataset_ids(hub):
    pr = hub.commit("org/name", files={"config.json": b"{}"}, branch="pr-work")
    hub.set_ref("org/name", "refs/pr/1", pr)
    r = head(hub, "/org/name/resolve/refs%2Fpr%2F1/config.json")
    assert r.headers["X-Repo-Commit"] == pr
    assert "?%2Forg%2Fname%2Fresolve%2Frefs%2Fpr%2F1%2Fconfig.json=&" in r.headers["Location"]
    sha = hub.add_repo("gpt2", files={"vocab.json": b"{}"})
    assert head(hub, "/gpt2/resolve/main/vocab.json").headers["X-Repo-Commit"] == sha
    dsha = hub.add_repo("org/data", files={"data/train.parquet": b"PAR1"}, repo_type="dataset")
    r = requests.get(hub.url + "/datasets/org/data/resolve/main/data/train.parquet", timeout=T)
    assert r.history[0].status_code == 302 and r.content == b"PAR1"
    assert r.history[0].headers["X-Repo-Commit"] == dsha


def test_resolve_cache_gzips_text_for_get_but_not_for_head(hub):
    r = url_path(hub, "/org/name/resolve/main/notes.txt", headers={"Accept-Encoding": "gzip"}, stream=True)
    assert r.headers["Content-Encoding"] == "gzip"
    assert r.headers["Transfer-Encoding"] == "chunked" and "Content-Length" not in r.headers
    assert gzip.decompress(r.raw.read()) == TEXT
    h = requests.head(r.url, headers={"Accept-Encoding": "gzip"}, timeout=T)
    assert h.headers["Content-Length"] == str(len(TEXT)) and "Content-Encoding" not in h.headers
    binary = url_path(hub, "/org/name/resolve/main/sub/deep/b.bin", headers={"Accept-Encoding": "gzip"})
    assert "Content-Encoding" not in binary.headers and binary.content == b"\x00\x01"


def test_resolve_cache_range_and_if_none_match(hub):
    r = url_path(hub, "/org/name/resolve/main/notes.txt", headers={"Range": "bytes=2-5"})
    assert r.status_code == 206 and r.content == TEXT[2:6]
    assert r.headers["Content-Range"] == "bytes 2-5/%d" % len(TEXT)
    etag = r.headers["ETag"]
    assert url_path(hub, "/org/name/resolve/main/notes.txt", headers={"If-None-Match": etag}).status_code == 304


# -- /resolve: LFS files and the CDN (§3, §4.2, §5) -----------------------------


def test_lfs_file_is_a_302_with_hf_and_xet_headers(hub):
    r = head(hub, "/org/name/resolve/main/model.safetensors")
    digest = sha256_hex(WEIGHTS)
    assert r.status_code == 302
    assert r.headers["Location"].startswith(hub.cdn_url + "/repos/")
    assert r.headers["X-Repo-Commit"] == hub.sha
    assert r.headers["X-Linked-Etag"] == r.headers["ETag"] == '"%s"' % digest
    assert r.headers["X-Linked-Size"] == str(len(WEIGHTS))
    assert re.fullmatch("[0-9a-f]{64}", r.headers["X-Xet-Hash"])
    route = "/api/models/org/name/xet-read-token/%s" % hub.sha
    assert r.headers["X-Xet-Refresh-Route"] == route
    assert r.headers["Link"] == '<%s%s>; rel="xet-auth", <%s/v1/reconstructions/%s>; rel="xet-reconstruction-info"' % (
        hub.url, route, hub.cdn_url, r.headers["X-Xet-Hash"])
    g = requests.get(hub.url + "/org/name/resolve/main/model.safetensors", allow_redirects=False, timeout=T)
    assert g.text.startswith("Found. Redirecting to " + hub.cdn_url)
    assert g.headers["Content-Length"] == str(len(g.content))


def test_no_xet_signals_when_disabled():
    with FakeHub(xet=False) as hub:
        hub.add_repo("org/name", files={"model.safetensors": WEIGHTS})
        r = head(hub, "/org/name/resolve/main/model.safetensors")
        assert r.status_code == 302 and "X-Linked-Etag" in r.headers
        assert not {"X-Xet-Hash", "X-Xet-Refresh-Route", "Link"} & set(r.headers)
        tree = url_path(hub, "/api/models/org/name/tree/main").json()
        assert "lfs" in tree[0] and "xetHash" not in tree[0]
        assert url_path(hub, "/api/models/org/name").json()["xetEnabled"] is False


def test_signed_url_changes_per_request_and_serves_the_blob(hub):
    first, second = cdn_location(hub), cdn_location(hub)
    assert first != second
    assert hub.cdn_url != hub.url
    for location in (first, second):
        r = requests.get(location, timeout=T)
        assert r.status_code == 200 and r.content == WEIGHTS
        assert r.headers["ETag"].strip('"') != sha256_hex(WEIGHTS)  # S3-style, never the HF etag
        assert r.headers["Content-Disposition"] == \
            "inline; filename*=UTF-8''model.safetensors; filename=\"model.safetensors\";"


@pytest.mark.parametrize("tamper", [
    lambda u: u.replace("Signature=", "Signature=x"),
    lambda u: u.replace("*", "%2A"),  # a re-encoding proxy
    lambda u: u.replace("+", "%20"),
    lambda u: re.sub(r"Expires=(\d+)", lambda m: "Expires=%d" % (int(m.group(1)) + 1), u),
    lambda u: u.replace("/repos/", "/repos/0"),
    lambda u: u.split("?")[0],
], ids=["signature", "star", "plus", "expires", "path", "no-query"])
def test_tampered_signed_url_is_access_denied(hub, tamper):
    location = cdn_location(hub)
    bad = tamper(location)
    assert bad != location
    r = requests.get(bad, timeout=T)
    assert r.status_code == 403 and b"<Code>AccessDenied</Code>" in r.content


def test_signed_url_expires_after_ttl():
    now = [1_000_000.0]
    with FakeHub(clock=lambda: now[0], cdn_url_ttl=60) as hub:
        hub.add_repo("org/name", files={"model.safetensors": WEIGHTS})
        location = cdn_location(hub)
        assert requests.get(location, timeout=T).status_code == 200
        now[0] += 61
        r = requests.get(location, timeout=T)
        assert r.status_code == 403 and b"AccessDenied" in r.content


SIZE = len(WEIGHTS)


@pytest.mark.parametrize("spec, status, content_range, body", [
    ("bytes=0-0", 206, "bytes 0-0/%d" % SIZE, WEIGHTS[:1]),
    ("bytes=10-19", 206, "bytes 10-19/%d" % SIZE, WEIGHTS[10:20]),
    ("bytes=%d-%d" % (SIZE - 5, SIZE), 206, "bytes %d-%d/%d" % (SIZE - 5, SIZE - 1, SIZE), WEIGHTS[-5:]),
    ("bytes=100-", 206, "bytes 100-%d/%d" % (SIZE - 1, SIZE), WEIGHTS[100:]),
    ("bytes=-7", 206, "bytes %d-%d/%d" % (SIZE - 7, SIZE - 1, SIZE), WEIGHTS[-7:]),
    ("bytes=%d-" % SIZE, 416, "bytes */%d" % SIZE, None),
], ids=["zero-zero", "inner", "clamped-end", "open-end", "suffix", "past-eof"])
def test_cdn_single_ranges(hub, spec, status, content_range, body):
    r = requests.get(cdn_location(hub), headers={"Range": spec}, timeout=T)
    assert r.status_code == status
    assert r.headers["Content-Range"] == content_range
    if body is not None:
        assert r.content == body and r.headers["Content-Length"] == str(len(body))


# -- /api (§2.2, §4.3) ----------------------------------------------------------


def test_tree_paginates_with_absolute_next_links(hub):
    url, pages, entries = hub.url + "/api/models/org/name/tree/main?recursive=true&expand=false", 0, []
    while url:
        assert url.startswith(hub.url + "/api/models/org/name/tree/main?recursive=true&expand=false")
        r = requests.get(url, timeout=T)
        assert r.status_code == 200 and len(r.json()) <= 2
        entries += r.json()
        pages += 1
        url = r.links.get("next", {}).get("url")
    assert pages == 4
    by_path = {e["path"]: e for e in entries}
    assert sorted(by_path) == ["config.json", "model.safetensors", "notes.txt", "sub", "sub/a.json",
                               "sub/deep", "sub/deep/b.bin"]
    assert by_path["config.json"] == {"type": "file", "oid": git_blob_sha1(CONFIG), "size": len(CONFIG),
                                      "path": "config.json"}
    lfs = by_path["model.safetensors"]
    assert lfs["lfs"]["oid"] == sha256_hex(WEIGHTS) and lfs["lfs"]["size"] == SIZE and lfs["xetHash"]
    assert by_path["sub"]["type"] == "directory" and by_path["sub"]["size"] == 0
    top = url_path(hub, "/api/models/org/name/tree/main/sub").json()
    assert [e["path"] for e in top] == ["sub/a.json", "sub/deep"]


def test_paths_info_lists_known_paths_only(hub):
    r = requests.post(hub.url + "/api/models/org/name/paths-info/main", timeout=T,
                      data={"paths": ["config.json", "missing.txt", "sub", "model.safetensors"], "expand": False})
    assert r.status_code == 200
    got = {e["path"]: e for e in r.json()}
    assert sorted(got) == ["config.json", "model.safetensors", "sub"]
    assert got["model.safetensors"]["lfs"]["oid"] == sha256_hex(WEIGHTS)


def test_model_info_follows_revisions(hub):
    old = hub.sha
    hub.set_ref("org/name", "v1.0", old)
    new = hub.commit("org/name", files={"config.json": b"{}", "extra.txt": b"x"})
    assert url_path(hub, "/api/models/org/name").json()["sha"] == new
    info = url_path(hub, "/api/models/org/name/revision/v1.0?blobs=true").json()
    assert info["sha"] == old and info["id"] == "org/name" and info["private"] is False
    siblings = {s["rfilename"]: s for s in info["siblings"]}
    assert "extra.txt" not in siblings
    assert siblings["config.json"]["blobId"] == git_blob_sha1(CONFIG)
    assert siblings["model.safetensors"]["lfs"]["sha256"] == sha256_hex(WEIGHTS)
    assert url_path(hub, "/api/models/org/name/revision/%s" % old).json()["sha"] == old
    # the sha pins content; main moved
    assert url_path(hub, "/org/name/resolve/%s/config.json" % old).content == CONFIG
    assert url_path(hub, "/org/name/resolve/main/config.json").content == b"{}"


def test_misc_api_routes(hub):
    assert url_path(hub, "/api/agent-harnesses").json() == {"standardEnvVars": [], "harnesses": {}}
    assert url_path(hub, "/api/whoami-v2").status_code == 401
    assert url_path(hub, "/api/whoami-v2", headers={"Authorization": "Bearer " + TOKEN}).status_code == 200
    assert url_path(hub, "/api/unknown/thing").status_code == 404
    token = url_path(hub, "/api/models/org/name/xet-read-token/%s" % hub.sha)
    assert token.headers["X-Xet-Cas-Url"] == hub.cdn_url and token.headers["X-Xet-Access-Token"]
    assert int(token.headers["X-Xet-Token-Expiration"]) > time.time()
    for version in ("v1", "v2"):     # the CAS (fake_hub_xet.py, tested in test_fake_hub_xet.py)
        url = "%s/%s/reconstructions/abc" % (hub.cdn_url, version)
        assert requests.get(url, timeout=T).status_code == 401          # no token
        bearer = {"Authorization": "Bearer " + token.headers["X-Xet-Access-Token"]}
        assert requests.get(url, headers=bearer, timeout=T).status_code == 401   # not this repo's file
    assert hub.count(path_contains="xet-read-token") == 1
    assert hub.count(server="cdn", path_contains="/reconstructions/") == 4


# -- errors (§4.1) ----------------------------------------------------------------

GOOD, BAD = {"Authorization": "Bearer " + TOKEN}, {"Authorization": "Bearer hf_wrong"}


@pytest.mark.parametrize("path, headers, status, code, message", [
    ("/org/nope/resolve/main/config.json", {}, 401, "RepoNotFound", "Repository not found"),
    ("/org/nope/resolve/main/config.json", GOOD, 404, "RepoNotFound", "Repository not found"),
    ("/api/models/org/nope", {}, 401, "RepoNotFound", "Repository not found"),
    ("/org/private/resolve/main/config.json", {}, 401, "RepoNotFound", "Repository not found"),
    ("/org/gated/resolve/main/config.json", {}, 401, "GatedRepo", "Access to model org/gated is restricted"),
    ("/org/name/resolve/nope/config.json", {}, 404, "RevisionNotFound", "Invalid rev id: nope"),
    ("/org/name/resolve/refs%2Fpr%2F9/config.json", {}, 404, "RevisionNotFound", "Invalid rev id: refs/pr/9"),
    ("/api/models/org/name/revision/nope", {}, 404, "RevisionNotFound", "Invalid rev id: nope"),
    ("/org/name/resolve/main/missing.json", {}, 404, "EntryNotFound", "Entry not found"),
    ("/org/name/resolve/main/config.json", BAD, 401, None, "Invalid credentials in Authorization header"),
], ids=["repo-anon", "repo-token", "api-repo", "private-anon", "gated-anon", "revision", "pr-ref", "api-revision",
        "entry", "bad-token"])
def test_error_matrix(hub, path, headers, status, code, message):
    hub.add_repo("org/private", files={"config.json": CONFIG}, private=True)
    hub.add_repo("org/gated", files={"config.json": CONFIG}, gated=True)
    r = head(hub, path, headers=headers)
    assert r.status_code == status
    assert r.headers.get("X-Error-Code") == code
    assert r.headers["X-Error-Message"].startswith(message)
    assert ("X-Repo-Commit" in r.headers) == (code == "EntryNotFound")
    body = url_path(hub, path, headers=headers).json()
    assert body["error"] == r.headers["X-Error-Message"]


def test_private_and_gated_content_with_the_right_token(hub):
    hub.add_repo("org/private", files={"config.json": CONFIG}, private=True)
    hub.add_repo("org/gated", files={"config.json": CONFIG}, gated=True)
    for repo in ("org/private", "org/gated"):
        assert url_path(hub, "/%s/resolve/main/config.json" % repo, headers=GOOD).content == CONFIG


def test_gated_with_an_unauthorised_token_is_403():
    with FakeHub(token=None) as hub:
        hub.add_repo("org/gated", files={"config.json": CONFIG}, gated="manual")
        r = head(hub, "/org/gated/resolve/main/config.json", headers={"Authorization": "Bearer anyone"})
        assert r.status_code == 403 and r.headers["X-Error-Code"] == "GatedRepo"
        assert url_path(hub, "/api/models/org/gated").json()["gated"] == "manual"  # metadata stays public


def test_users_read_what_they_were_granted_until_it_is_revoked(hub):
    """Per-user access as the Hub keeps it (hf-protocol.md §4.3): a private repo the user
    may not read does not exist for it (404 RepoNotFound), a gated one answers 403
    GatedRepo, and both open once granted; the owner's token reads everything."""
    hub.add_repo("org/private", files={"config.json": CONFIG}, private=True)
    hub.add_repo("org/gated", files={"config.json": CONFIG}, gated=True)
    hub.add_user("hf_alice", "alice")
    hub.add_user("hf_bob", "bob")
    alice, bob = {"Authorization": "Bearer hf_alice"}, {"Authorization": "Bearer hf_bob"}
    hub.grant("hf_alice", "org/private")
    hub.grant("hf_alice", "org/gated")

    def answer(path, headers):
        r = head(hub, path, headers=headers)
        return r.status_code, r.headers.get("X-Error-Code")
    for who in (alice, GOOD):
        for repo in ("org/private", "org/gated"):
            assert url_path(hub, "/%s/resolve/main/config.json" % repo, headers=who).content == CONFIG
    assert answer("/org/private/resolve/main/config.json", bob) == (404, "RepoNotFound")
    assert answer("/org/gated/resolve/main/config.json", bob) == (403, "GatedRepo")
    assert answer("/api/models/org/private", bob) == (404, "RepoNotFound")
    assert url_path(hub, "/api/whoami-v2", headers=bob).json()["name"] == "bob"
    hub.revoke("hf_alice", "org/gated")
    assert answer("/org/gated/resolve/main/config.json", alice) == (403, "GatedRepo")
    assert url_path(hub, "/org/private/resolve/main/config.json", headers=alice).content == CONFIG
    assert answer("/org/gated/resolve/main/config.json", {"Authorization": "Bearer hf_mallory"}) == (401, None)


def test_renamed_repo_answers_relative_307_keeping_the_query(hub):
    hub.add_repo("old-name", files={"config.json": CONFIG})
    hub.rename_repo("old-name", "org/new-name")
    r = head(hub, "/old-name/resolve/main/config.json?download=true")
    assert r.status_code == 307 and r.headers["Location"] == "/org/new-name/resolve/main/config.json?download=true"
    r = head(hub, "/api/models/old-name/revision/main?blobs=true")
    assert r.status_code == 307 and r.headers["Location"] == "/api/models/org/new-name/revision/main?blobs=true"
    followed = url_path(hub, "/api/models/old-name/revision/main")
    assert followed.status_code == 200 and followed.json()["id"] == "org/new-name"


# -- counters ------------------------------------------------------------------------


def test_counters_track_requests_and_blob_bytes(hub):
    digest = sha256_hex(WEIGHTS)
    location = cdn_location(hub)
    requests.get(location, timeout=T)
    requests.get(location, headers={"Range": "bytes=0-9"}, timeout=T)
    requests.head(location, timeout=T)
    url_path(hub, "/org/name/resolve/main/config.json", headers={"Accept-Encoding": "identity"})
    assert hub.body_bytes(digest) == SIZE + 10 and hub.body_fetches(digest) == 2
    assert hub.body_bytes(git_blob_sha1(CONFIG)) == len(CONFIG)  # either id works
    assert hub.total_body_bytes() == SIZE + 10 + len(CONFIG)
    assert hub.count(server="cdn") == 3 and hub.count(method="HEAD", server="hub") == 1
    assert hub.count(method="GET", path_contains="resolve-cache") == 1
    ranged = [r for r in hub.requests if r.range]
    assert [r.range for r in ranged] == ["bytes=0-9"] and ranged[0].headers["range"] == "bytes=0-9"
    hub.reset_counters()
    assert hub.count() == 0 and hub.total_body_bytes() == 0 and hub.body_fetches(digest) == 0


# -- faults --------------------------------------------------------------------------


def cdn_target(hub):
    return cdn_location(hub)[len(hub.cdn_url):]


def test_drop_after_gives_a_short_body_once(hub):
    hub.faults.drop_after(1000)
    target = cdn_target(hub)
    head_text, body, error = raw_get(hub.cdn_netloc, target)
    assert "Content-Length: %d" % SIZE in head_text and len(body) == 1000 and error is None
    assert raw_get(hub.cdn_netloc, target)[1] == WEIGHTS
    assert hub.body_fetches(sha256_hex(WEIGHTS)) == 2


def test_reset_after_ends_in_rst(hub):
    hub.faults.reset_after(1000)
    _, body, error = raw_get(hub.cdn_netloc, cdn_target(hub), settle=0.2)
    assert isinstance(error, ConnectionResetError) and len(body) <= 1000


def test_hang_after_stalls_the_body(hub):
    hub.faults.hang_after(100, seconds=0.5)
    started = time.monotonic()
    r = requests.get(cdn_location(hub), timeout=T)
    assert r.content == WEIGHTS and time.monotonic() - started >= 0.45
    with pytest.raises(requests.exceptions.ConnectionError):  # read timeout mid-body
        hub.faults.hang_after(100, seconds=3)
        requests.get(cdn_location(hub), timeout=(T, 0.3)).content


def test_throttle_paces_until_cleared(hub):
    hub.faults.throttle(400_000, match="/repos/")
    started = time.monotonic()
    assert requests.get(cdn_location(hub), timeout=T).content == WEIGHTS  # 256 KiB at 400 kB/s
    assert time.monotonic() - started >= 0.5
    hub.faults.clear()
    started = time.monotonic()
    requests.get(cdn_location(hub), timeout=T)
    assert time.monotonic() - started < 0.5


def test_status_fault_answers_once_and_respects_match(hub):
    hub.faults.status(503, match="config.json")
    assert head(hub, "/org/name/resolve/main/notes.txt").status_code == 307
    assert head(hub, "/org/name/resolve/main/config.json").status_code == 503
    assert head(hub, "/org/name/resolve/main/config.json").status_code == 307
    hub.faults.status(502, times=2)
    assert [head(hub, "/api/models/org/name").status_code for _ in range(3)] == [502, 502, 200]


def test_corrupt_flips_exactly_one_byte(hub):
    hub.faults.corrupt()
    bad = requests.get(cdn_location(hub), timeout=T).content
    diff = [i for i in range(SIZE) if bad[i] != WEIGHTS[i]]
    assert diff == [SIZE // 2]
    assert requests.get(cdn_location(hub), timeout=T).content == WEIGHTS


# -- connections and lifecycle -----------------------------------------------------------


def test_keep_alive_then_connection_close(hub):
    host, port = hub.url[len("http://"):].split(":")
    with socket.create_connection((host, int(port)), timeout=T) as s:
        request = "GET /api/agent-harnesses HTTP/1.1\r\nHost: x\r\n\r\n"
        s.sendall((request * 2).encode())  # pipelined on one connection
        data = b""
        while data.count(b'"harnesses"') < 2:
            data += s.recv(4096)
        s.sendall(b"GET /api/agent-harnesses HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        while chunk := s.recv(4096):
            data += chunk
    assert data.count(b"HTTP/1.1 200") == 3 and data.endswith(b"}")


def test_stop_ends_idle_connections_and_hangs_and_is_idempotent():
    hub = FakeHub().start()
    hub.add_repo("org/name", files={"model.safetensors": WEIGHTS})
    hub.faults.hang_after(10, seconds=30)
    result = {}
    hanging = threading.Thread(target=lambda: result.setdefault("r", raw_get(hub.cdn_netloc, cdn_target(hub))))
    hanging.start()
    idle = socket.create_connection(hub.url[len("http://"):].split(":"), timeout=T)
    time.sleep(0.2)
    started = time.monotonic()
    hub.stop()
    hub.stop()
    hanging.join(T)
    assert time.monotonic() - started < 3 and not hanging.is_alive()
    assert len(result["r"][1]) == 10  # the stall was cut short
    assert idle.recv(10) == b""
    idle.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("fake-hub")]
    with pytest.raises(OSError):
        requests.get(hub.url + "/api/agent-harnesses", timeout=1)


# -- scripts/run_fake_hub.py ---------------------------------------------------------------


def test_script_rejects_bad_flags_with_one_line():
    p = subprocess.run([sys.executable, str(SCRIPT), "--lfs-mib", "-3"], capture_output=True, text=True, timeout=T)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1


def test_script_serves_demo_content_until_sigterm():
    p = subprocess.Popen([sys.executable, str(SCRIPT), "--lfs-mib", "1"], stdout=subprocess.PIPE)
    try:
        out, deadline = b"", time.monotonic() + T
        while b"\n--upstream" not in out and time.monotonic() < deadline:
            if select.select([p.stdout], [], [], 0.1)[0]:
                out += os.read(p.stdout.fileno(), 65536)
        lines = out.decode().splitlines()
        endpoint = next(line.split("=", 1)[1].strip() for line in lines if line.startswith("export HF_ENDPOINT="))
        flags = next(line for line in lines if line.startswith("--upstream")).split()
        assert flags == ["--upstream", endpoint, "--allow-upstream-host", flags[3]]
        info = requests.get(endpoint + "/api/models/demo/tiny-model?blobs=true", timeout=T).json()
        sizes = {s["rfilename"]: s["size"] for s in info["siblings"]}
        assert set(sizes) == {"config.json", "tokenizer.json", "README.md", "model.safetensors"}
        assert sizes["model.safetensors"] > 1024 * 1024
        location = requests.head(endpoint + "/datasets/demo/tiny-dataset/resolve/main/data/train.parquet",
                                 timeout=T).headers["Location"]
        assert location.startswith("http://%s/" % flags[3])
        p.send_signal(signal.SIGTERM)
        assert p.wait(T) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(T)
        p.stdout.close()
