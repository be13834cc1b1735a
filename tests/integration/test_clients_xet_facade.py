"""The real hf_xet through `pulsys --xet facade` (ADR 0019): client -> pulsys (token
route, CAS, xorb ranges) -> the fake Hub's CAS (pulsys/testing/fake_hub_xet.py).

Cold: pulsys asks the Hub for a Xet token and the upstream CAS for reconstructions and
xorb ranges, once; the client gets every file byte-exact and never talks to the Hub.
Warm: a fresh client cache, the fake Hub stopped: the same files from pulsys alone.
"""

import hashlib
import json
import random
import time
import urllib.request

import pytest

from tests import xetclient

from .clients import client_env, json_out, run_cli, run_client
from .conftest import GATED, MODEL, populate

pytestmark = pytest.mark.clients

T = 120
NO_TELEMETRY = {"HF_XET_TELEMETRY_ENABLED": "false"}
# what pulsys reads of a one-chunk xorb's end to check it (upstream/xet.py _fetch_footer):
# the footer's 4-byte length, then the footer (92 bytes + 40 a chunk) and that length again
ONE_CHUNK_FOOTER_READ = 4 + 92 + 40 + 4


@pytest.fixture(scope="module")
def xet_hub(make_hub):
    hub = make_hub(xet=True)
    return hub, populate(hub)


def _facade(pulsys_server, hub, cache_dir, *args):
    return pulsys_server(hub, cache_dir, "--xet", "facade", *args,
                         allow_hosts=[hub.cdn_netloc, hub.xorb_url[len("http://"):]])


def _download(venv, proxy, hf_home, repo, filename, *args, env_extra=None):
    env = client_env(proxy.url, hf_home, **dict(NO_TELEMETRY, **(env_extra or {})))
    return json_out(run_client(venv, "hf_hub_download", [repo, filename, *args], env, timeout=T, check=False))


def _vars(proxy):
    with urllib.request.urlopen(proxy.admin_url + "/debug/vars", timeout=5) as r:
        return json.loads(r.read())


def test_hf_xet_cold_then_warm_with_the_hub_stopped(latest_venv, make_hub, pulsys_server, tmp_path,
                                                    new_hf_home):
    hub = make_hub(xet=True)
    corpus = populate(hub)
    proxy = _facade(pulsys_server, hub, tmp_path / "cache")
    out = _download(latest_venv, proxy, new_hf_home(), MODEL, "model.safetensors")
    assert out.get("sha256") == corpus.sha256(MODEL, "model.safetensors"), out
    assert out["client"]["hf_xet"] and not out["client"]["xet_disabled"]
    # pulsys was the CAS: the Hub saw its token route and CAS asked by pulsys, and the
    # plain-HTTP CDN URL was never used
    assert hub.count("GET", "/xet-read-token/", server="hub") >= 1
    assert hub.count("GET", "/reconstructions/", server="cdn") >= 1
    assert hub.count(None, "/repos/", server="cdn") == 0
    fetched = hub.xorb_bytes()
    assert fetched > 0
    v = _vars(proxy)
    assert v["xet_tokens"] >= 1 and v["xet_xorb_fills"] >= 1
    assert v["xet_xorb_bytes_fetched"] == fetched

    # a second client, cold client cache: xorb ranges from pulsys's cache only
    hub.reset_counters()
    out = _download(latest_venv, proxy, new_hf_home(), MODEL, "model.safetensors")
    assert out.get("sha256") == corpus.sha256(MODEL, "model.safetensors"), out
    assert hub.xorb_bytes() == 0

    # the Hub down: token, reconstruction and xorbs all from pulsys
    hub.stop()
    out = _download(latest_venv, proxy, new_hf_home(), MODEL, "model.safetensors")
    assert out.get("sha256") == corpus.sha256(MODEL, "model.safetensors"), out


def test_snapshot_and_hf_download_cold_then_warm_offline(latest_venv, xet_hub, pulsys_server, tmp_path,
                                                         new_hf_home):
    """2.x snapshot_download builds the token route from /tree's xetHash (no /resolve per
    LFS file) and `hf download` does what users type; both cold, then warm with pulsys
    --offline (no upstream at all), byte-exact."""
    hub, corpus = xet_hub
    proxy = _facade(pulsys_server, hub, tmp_path / "cache")

    def both(tag):
        env = client_env(proxy.url, new_hf_home(), **NO_TELEMETRY)
        out = json_out(run_client(latest_venv, "snapshot_download", [MODEL], env, timeout=T))
        assert out["files"] == corpus.expected(MODEL)
        dest = tmp_path / ("hf-download-" + tag)
        cp = run_cli(latest_venv, "hf", ["download", MODEL, "model.safetensors", "--local-dir", str(dest)],
                     client_env(proxy.url, new_hf_home(), **NO_TELEMETRY), timeout=T, check=False)
        assert cp.returncode == 0, cp.stderr
        got = hashlib.sha256((dest / "model.safetensors").read_bytes()).hexdigest()
        assert got == corpus.sha256(MODEL, "model.safetensors")

    hub.reset_counters()
    both("cold")
    assert hub.count("GET", "/reconstructions/", server="cdn") >= 2      # both LFS files over Xet
    assert hub.count(None, "/repos/", server="cdn") == 0
    proxy.stop()
    proxy.extra_args.append("--offline")
    proxy.start()
    hub.reset_counters()
    both("offline")
    assert hub.requests == []


def test_a_file_the_bridge_refuses_is_served_over_xet(latest_venv, make_hub, pulsys_server, tmp_path,
                                                      new_hf_home):
    """The Hub serves files over 50 GB through Xet only (its plain-HTTP bridge refuses
    them; the fake's `bridge_limit` is that switch at 1 MiB): through --xet strip the
    client has no way to get one, through --xet facade it gets it byte-exact."""
    hub = make_hub(xet=True)
    corpus = populate(hub)
    hub.bridge_limit = 1 << 20
    strip = pulsys_server(hub, tmp_path / "strip", allow_hosts=[hub.cdn_netloc])
    out = _download(latest_venv, strip, new_hf_home(), MODEL, "model.safetensors")
    assert "sha256" not in out and out.get("error"), out
    facade = _facade(pulsys_server, hub, tmp_path / "facade")
    out = _download(latest_venv, facade, new_hf_home(), MODEL, "model.safetensors")
    assert out.get("sha256") == corpus.sha256(MODEL, "model.safetensors"), out


def test_a_second_revision_fetches_only_its_new_chunks(latest_venv, make_hub, pulsys_server, tmp_path,
                                                       new_hf_home):
    """A fine-tune or a new revision shares most chunks with the one before: after the
    first revision is cached, pulling the second moves only the changed chunk's xorb
    bytes from upstream (the cached xorb ranges around the unchanged chunks serve them)."""
    hub = make_hub(xet=True)
    old = random.Random(19).randbytes(8 * 1024 * 1024)        # 8 MiB: 128 chunks, 8 xorbs
    new = old[:3 * 1024 * 1024 + 10] + b"fine-tuned" * 10 + old[3 * 1024 * 1024 + 110:]
    repo = "acme/revised-model"
    first = hub.add_repo(repo, {"model.safetensors": old})
    second = hub.commit(repo, {"model.safetensors": new})
    proxy = _facade(pulsys_server, hub, tmp_path / "cache")
    hub.reset_counters()
    out = _download(latest_venv, proxy, new_hf_home(), repo, "model.safetensors", "--revision", first)
    assert out.get("sha256") == hashlib.sha256(old).hexdigest(), out
    whole = hub.xorb_bytes()
    assert whole > 0
    hub.reset_counters()
    out = _download(latest_venv, proxy, new_hf_home(), repo, "model.safetensors", "--revision", second)
    assert out.get("sha256") == hashlib.sha256(new).hexdigest(), out
    changed = hub.xorb_bytes()
    # one 64 KiB chunk changed (LZ4-framed where smaller, plus its 8-byte header), and
    # the footer of its new one-chunk xorb read to check it (ONE_CHUNK_FOOTER_READ)
    assert 0 < changed <= 64 * 1024 + 64 + ONE_CHUNK_FOOTER_READ, (changed, whole)
    # a plain-HTTP client of a third revision: assembled from xorb ranges, so it too
    # costs only the changed chunk, and nothing through the Hub's bridge
    third = hub.commit(repo, {"model.safetensors": new[:5 << 20] + b"again" + new[(5 << 20) + 5:]})
    hub.reset_counters()
    out = _download(latest_venv, proxy, new_hf_home(), repo, "model.safetensors", "--revision", third,
                    env_extra={"HF_HUB_DISABLE_XET": "1"})
    assert out.get("sha256") == hashlib.sha256(new[:5 << 20] + b"again" + new[(5 << 20) + 5:]).hexdigest(), out
    assert 0 < hub.xorb_bytes() <= 64 * 1024 + 64 + ONE_CHUNK_FOOTER_READ and hub.total_body_bytes() == 0


def test_gated_and_private_refused_per_user_as_the_hub_refuses(latest_venv, make_hub, pulsys_server, tmp_path,
                                                                new_hf_home):
    """--upstream-auth client: pulsys mints a CAS token only when the Hub gives that
    client's own token a Xet token for the repo; the Hub's refusal reaches the client as
    the Hub sent it; a CAS token for one repo reads no file of another."""
    hub = make_hub(xet=True)
    corpus = populate(hub)
    private = "acme/private-xet"
    corpus.add(hub, private, {"model.safetensors": random.Random(5).randbytes(200_000)}, private=True)
    for who in ("hf_alice", "hf_bob", "hf_carol"):
        hub.add_user(who)
    hub.grant("hf_alice", GATED)
    hub.grant("hf_carol", private)
    proxy = _facade(pulsys_server, hub, tmp_path / "cache", "--upstream-auth", "client")

    out = _download(latest_venv, proxy, new_hf_home(), GATED, "model.safetensors", "--token", "hf_alice")
    assert out.get("sha256") == corpus.sha256(GATED, "model.safetensors"), out
    assert hub.count("GET", "/reconstructions/", server="cdn") >= 1
    out = _download(latest_venv, proxy, new_hf_home(), GATED, "model.safetensors", "--token", "hf_bob")
    assert out.get("error") == "GatedRepoError", out
    out = _download(latest_venv, proxy, new_hf_home(), private, "model.safetensors", "--token", "hf_alice")
    assert out.get("error") == "RepositoryNotFoundError", out

    # the token route itself: what the Hub answers, status and error code, per user
    for token, repo in (("hf_bob", GATED), ("hf_alice", private), (None, private)):
        route = "/api/models/%s/xet-read-token/main" % repo
        st, h, _ = xetclient.get(proxy.url + route, token)
        hst, hh, _ = xetclient.get(hub.url + route, token)
        assert (st, h.get("X-Error-Code")) == (hst, hh.get("X-Error-Code")), (token, repo)
        assert st in (401, 403, 404)
    st, h, body = xetclient.get(proxy.url + "/api/models/%s/xet-read-token/main" % GATED, "hf_alice")
    assert st == 200 and json.loads(body)["casUrl"] == proxy.url + "/cas"
    alice_cas = json.loads(body)["accessToken"]
    assert h["X-Xet-Access-Token"] == alice_cas and "hf_alice" not in alice_cas

    # alice's CAS token is for the gated repo: the private repo's file stays closed to it
    _, _, tree = xetclient.get(hub.url + "/api/models/%s/tree/main" % private, "hf_carol")
    private_hash = [e["xetHash"] for e in json.loads(tree) if e["path"] == "model.safetensors"][0]
    st, _, _ = xetclient.get(proxy.url + "/cas/v2/reconstructions/" + private_hash, alice_cas)
    assert st in (401, 403, 404)
    st, _, _ = xetclient.get(proxy.url + "/cas/v2/reconstructions/" + private_hash, "pxet1.forged.token")
    assert st == 401
    # carol, granted the private repo, gets it over Xet
    out = _download(latest_venv, proxy, new_hf_home(), private, "model.safetensors", "--token", "hf_carol")
    assert out.get("sha256") == corpus.sha256(private, "model.safetensors"), out


def test_one_download_serves_both_kinds_of_client(latest_venv, xet_hub, pulsys_server, tmp_path, new_hf_home):
    """A plain-HTTP client (HF_HUB_DISABLE_XET=1, like curl) gets a Xet file assembled
    from xorb ranges (ADR 0019 point 4), never through the Hub's bridge: in either order,
    the second kind of client costs no upstream bytes. The Xet signals are there for
    those who use them; a forged xorb URL is refused."""
    hub, corpus = xet_hub
    proxy = _facade(pulsys_server, hub, tmp_path / "cache")
    plain = {"HF_HUB_DISABLE_XET": "1"}
    size = len(corpus.data(MODEL, "model.safetensors"))

    hub.reset_counters()          # plain first, then hf_xet
    out = _download(latest_venv, proxy, new_hf_home(), MODEL, "model.safetensors", env_extra=plain)
    assert out.get("sha256") == corpus.sha256(MODEL, "model.safetensors"), out
    assert hub.total_body_bytes() == 0 and hub.xorb_bytes() > 0
    assert _vars(proxy)["xet_assembled_bytes"] == size
    hub.reset_counters()
    out = _download(latest_venv, proxy, new_hf_home(), MODEL, "model.safetensors")
    assert out.get("sha256") == corpus.sha256(MODEL, "model.safetensors"), out
    assert hub.xorb_bytes() == 0 and hub.total_body_bytes() == 0

    hub.reset_counters()          # hf_xet first, then plain
    out = _download(latest_venv, proxy, new_hf_home(), MODEL, "weights/extra.bin")
    assert out.get("sha256") == corpus.sha256(MODEL, "weights/extra.bin"), out
    assert hub.xorb_bytes() > 0
    hub.reset_counters()
    out = _download(latest_venv, proxy, new_hf_home(), MODEL, "weights/extra.bin", env_extra=plain)
    assert out.get("sha256") == corpus.sha256(MODEL, "weights/extra.bin"), out
    assert hub.xorb_bytes() == 0 and hub.total_body_bytes() == 0

    st, h, _ = xetclient.get(proxy.url + "/%s/resolve/main/model.safetensors" % MODEL)
    assert st == 200 and len(h["X-Xet-Hash"]) == 64 and 'rel="xet-auth"' in h["Link"]
    st, _, body = xetclient.get(proxy.url + "/api/models/%s/tree/main" % MODEL)
    assert st == 200 and b'"xetHash"' in body
    st, _, body = xetclient.get(proxy.url + "/cas/xorbs/%s/0-1?e=9999999999&s=bad" % ("0" * 64))
    assert st == 403


def test_expired_upstream_xorb_urls_are_renewed(make_hub, pulsys_server, tmp_path):
    """The upstream CAS's xorb URLs expire (403); pulsys, holding a reconstruction whose
    URLs have, asks it again for new ones and serves the range."""
    hub = make_hub(xet=True)
    corpus = populate(hub)
    hub.xorb_url_ttl = 2               # seconds (whole: 1 to 2 s of validity)
    proxy = _facade(pulsys_server, hub, tmp_path / "cache")
    cas, token = xetclient.cas_token(proxy.url, MODEL)
    answer = xetclient.reconstruction(cas, token, xetclient.xet_hash(proxy.url, MODEL, "model.safetensors"))
    time.sleep(3.1)                  # the upstream URLs pulsys holds are expired now
    assert xetclient.download(answer) == corpus.data(MODEL, "model.safetensors")
    assert hub.count("GET", "/reconstructions/", server="cdn") == 2
    assert _vars(proxy)["fill_refetches"] >= 1


def test_a_corrupt_xorb_range_is_never_served_nor_kept(make_hub, pulsys_server, tmp_path):
    """A xorb range whose bytes upstream corrupted (a chunk that no longer decodes to its
    header's length) is refused with a 502 and counted, and nothing of it is stored: the
    next request fetches it again and gets the right bytes."""
    hub = make_hub(xet=True)
    corpus = populate(hub)
    proxy = _facade(pulsys_server, hub, tmp_path / "cache")
    cas, token = xetclient.cas_token(proxy.url, MODEL)
    answer = xetclient.reconstruction(cas, token, xetclient.xet_hash(proxy.url, MODEL, "model.safetensors"))
    xorb, entries = next(iter(answer["xorbs"].items()))
    url, span = entries[0]["url"], entries[0]["ranges"][0]["bytes"]
    hub.faults.corrupt(times=1, match="/xorbs/" + xorb)
    st, _, _ = xetclient.get(url, headers={"Range": "bytes=%d-%d" % (span["start"], span["end"])})
    assert st == 502
    v = _vars(proxy)
    assert v["integrity_failures"] == 1 and v["xet_xorb_fills"] == 0
    assert xetclient.download(answer) == corpus.data(MODEL, "model.safetensors")


def _suffix_reads(hub, xorb):
    """GETs of a xorb's end (suffix ranges: how pulsys reads its footer)."""
    return sum(1 for r in hub.requests if r.server == "xorb" and "/xorbs/" + xorb in r.path
               and (r.range or "").startswith("bytes=-"))


def test_a_changed_byte_inside_an_uncompressed_chunk_is_refused(make_hub, pulsys_server, tmp_path):
    """Random bytes travel uncompressed (scheme 0), so a byte changed inside one leaves
    every header, length and count right: only the chunk's BLAKE3 hash against the
    xorb's footer (read once, authenticated by the xorb's name) tells. pulsys answers
    502, counts it, keeps nothing, and the next request gets the right bytes."""
    hub = make_hub(xet=True)
    data = random.Random(7).randbytes(3 * 65536 + 100)        # one xorb of 4 chunks
    hub.add_repo("acme/raw", {"model.safetensors": data})
    proxy = _facade(pulsys_server, hub, tmp_path / "cache")
    cas, token = xetclient.cas_token(proxy.url, "acme/raw")
    answer = xetclient.reconstruction(cas, token, xetclient.xet_hash(proxy.url, "acme/raw", "model.safetensors"))
    (xorb, entries), = answer["xorbs"].items()
    url, span = entries[0]["url"], entries[0]["ranges"][0]["bytes"]
    # where the fault lands (fake_hub_cdn.py: the middle byte of the body sent): inside
    # a stored chunk's data, not in a header
    x = hub._xet.xorbs[xorb]
    mid = span["start"] + (span["end"] - span["start"] + 1) // 2
    k = max(i for i, s in enumerate(x.starts) if s <= mid)
    assert mid - x.starts[k] >= 8 and x.data[x.starts[k] + 4] == 0     # scheme 0
    hub.faults.corrupt(times=1, match="/xorbs/" + xorb)
    st, _, body = xetclient.get(url, headers={"Range": "bytes=%d-%d" % (span["start"], span["end"])})
    assert st == 502 and b"BLAKE3" in body, body
    v = _vars(proxy)
    assert v["integrity_failures"] == 1 and v["xet_xorb_fills"] == 0 and v["xet_unverified_ranges"] == 0
    hub.reset_counters()
    assert xetclient.download(answer) == data
    assert hub.xorb_bytes() >= span["end"] - span["start"] + 1          # fetched again: nothing was kept
    assert _suffix_reads(hub, xorb) == 0                               # its footer was: read once, kept
    v = _vars(proxy)
    assert v["integrity_failures"] == 1 and v["xet_xorb_fills"] == 1 and v["xet_unverified_ranges"] == 0


def test_without_the_footer_ranges_are_checked_for_structure_and_counted(make_hub, pulsys_server, tmp_path):
    """A xorb host that refuses suffix ranges (416): no footer, so no chunk hash to check
    against; the download still works on the structural checks, each such range counted
    (xet_unverified_ranges). With footers, one read per xorb checks every range of it."""
    hub = make_hub(xet=True)
    corpus = populate(hub)
    hub.xorb_suffix_ranges = False
    proxy = _facade(pulsys_server, hub, tmp_path / "cache")
    cas, token = xetclient.cas_token(proxy.url, MODEL)
    answer = xetclient.reconstruction(cas, token, xetclient.xet_hash(proxy.url, MODEL, "model.safetensors"))
    assert xetclient.download(answer) == corpus.data(MODEL, "model.safetensors")
    v = _vars(proxy)
    assert v["xet_xorb_fills"] >= 3 and v["xet_unverified_ranges"] == v["xet_xorb_fills"]
    assert v["integrity_failures"] == 0

    hub.xorb_suffix_ranges = True
    data = random.Random(8).randbytes(2 << 20)                  # 2 xorbs
    hub.add_repo("acme/second", {"model.safetensors": data})
    cas, token = xetclient.cas_token(proxy.url, "acme/second")
    other = xetclient.reconstruction(cas, token, xetclient.xet_hash(proxy.url, "acme/second", "model.safetensors"))
    assert xetclient.download(other) == data and len(other["xorbs"]) == 2
    assert _vars(proxy)["xet_unverified_ranges"] == v["xet_unverified_ranges"]
    assert all(_suffix_reads(hub, xorb) == 2 for xorb in other["xorbs"])   # its length, then itself
