"""--shared-store with --xet facade: a xorb range one node fetched from the Hub's CAS is
served by another node from the fleet's bucket, verified, with no xorb byte from the
Hub; the second node still asks the Hub itself whether its client may read the repo."""

import os

from tests import xetclient
from tests.fleet.nodes import start_nodes, vars_of, wait_uploaded

REPO = "org/xet-model"


def test_node_c_takes_xorb_ranges_node_a_put_in_the_bucket(hub, s3, aws_env, tmp_path, stop_after):
    data = os.urandom(3 << 20) + b"tail"          # 4 xorbs of 1 MiB in the fake CAS
    hub.add_repo(REPO, files={"model.safetensors": data})
    nodes = stop_after(start_nodes(tmp_path, hub, s3.new_bucket(), s3.url, names=("a", "c"), xet="facade",
                                   allow_upstream_host=[hub.cdn_netloc, hub.xorb_url[len("http://"):]]))
    a, c = nodes["a"], nodes["c"]

    cas, token = xetclient.cas_token(a.url, REPO)
    answer = xetclient.reconstruction(cas, token, xetclient.xet_hash(a.url, REPO, "model.safetensors"))
    assert xetclient.download(answer) == data
    va = wait_uploaded(a, vars_of(a)["xet_xorb_fills"])
    # every range fetched went to the bucket (xet_xorb_bytes_fetched also counts the
    # xorbs' footers, read to check the ranges, which go there as metadata)
    ranges = sum(r["bytes"]["end"] - r["bytes"]["start"] + 1 for fs in answer["xorbs"].values() for f in fs
                 for r in f["ranges"])
    assert va["xet_xorb_fills"] >= 4 and va["shared_upload_bytes"] >= ranges
    assert va["xet_xorb_bytes_fetched"] > ranges and va["xet_unverified_ranges"] == 0

    hub.reset_counters()
    cas, token = xetclient.cas_token(c.url, REPO)
    answer = xetclient.reconstruction(cas, token, xetclient.xet_hash(c.url, REPO, "model.safetensors"))
    assert xetclient.download(answer) == data
    vc = vars_of(c)
    assert hub.xorb_bytes() == 0, {k: v for k, v in vc.items() if "shared" in k or "xet" in k}
    assert hub.count("GET", "/xet-read-token/", server="hub") == 1      # node C asked for its client
    vc = vars_of(c)
    assert vc["shared_fills"] >= 4 and vc["xet_xorb_fills"] == 0 and vc["shared_corrupt"] == 0
