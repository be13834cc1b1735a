"""cache/filesets.py, cache/negatives.py and upstream/negative.py: what pulsys may claim
is absent, and the bound on negative entries. Pure, no sockets."""

import json

from pulsys.cache.filesets import FileSets, first_page_query, next_query
from pulsys.cache.negatives import Negatives
from pulsys.model import target as T
from pulsys.model.entry import CANNED, FILE, Entry
from pulsys.model.key import cache_key, split_key
from pulsys.upstream.negative import entry_not_found, paths_not_found
from tests.indexes import new_index

C = "a" * 40


def test_split_key_inverts_cache_key_with_separators_in_fields():
    for f in [(T.API_TREE, "model", "o/n", C, "", "recursive=true&cursor=x"),
              (T.RESOLVE, "dataset", "o/n", "a|b", "c|d%7C", ""),
              (T.API_INFO, "model", "n", "%|%25", "", "")]:
        assert split_key(cache_key(*f)) == f
    assert split_key("nonsense") is None


def test_a_missing_path_is_neither_a_file_nor_a_folder_of_the_list():
    fs = FileSets()
    assert not fs.missing("model", "o/n", C, "x.json")        # no list: nothing is claimed
    fs.add("model", "o/n", C, ["config.json", "sub/dir/tok.json"])
    assert fs.missing("model", "o/n", C, "x.json")
    assert not fs.missing("model", "o/n", C, "config.json")
    assert not fs.missing("model", "o/n", C, "sub") and not fs.missing("model", "o/n", C, "sub/dir")
    assert fs.missing("model", "o/n", C, "sub/dir/other.json")
    assert not fs.missing("dataset", "o/n", C, "x.json")      # another repo type, another repo


def _info(siblings, sha=C):
    doc = {"id": "o/n", "sha": sha}
    if siblings is not None:
        doc["siblings"] = [{"rfilename": n} for n in siblings]
    return Entry(CANNED, "", status=200, body=json.dumps(doc).encode())


def test_an_info_counts_only_with_a_trustworthy_siblings_list():
    for siblings, known in ((["a.json"], True), ([], False), (None, False), (["x"] * 50001, False)):
        fs = FileSets()
        fs.learn(cache_key(T.API_INFO, "model", "o/n", "main", "", ""), _info(siblings), {}.get)
        assert fs.knows("model", "o/n", C) is known, siblings and len(siblings)
    fs = FileSets()
    fs.learn(cache_key(T.API_INFO, "model", "o/n", "", "", ""), _info(["a"], sha="main"), {}.get)
    assert len(fs) == 0                                          # no commit sha: nothing learned


def test_tree_queries_that_list_the_whole_commit():
    assert first_page_query("recursive=true&expand=false&cursor=abc") == "recursive=true&expand=false"
    assert first_page_query("recursive=True") == "recursive=True"
    assert first_page_query("recursive=false") is None and first_page_query("") is None
    assert first_page_query("recursive=true&limit=2") is None        # a filter we do not know
    assert next_query((("Link", '<http://h/api/models/o/n/tree/x?recursive=true&cursor=Z>; rel="next"'),)) \
        == "recursive=true&cursor=Z"
    assert next_query((("Content-Type", "application/json"),)) == ""


def _page(paths, next_q=None, key=""):
    headers = (("Link", '<http://hub/api/models/o/n/tree/%s?%s>; rel="next"' % (C, next_q)),) if next_q else ()
    return Entry(CANNED, key, status=200, headers=headers,
                 body=json.dumps([{"type": "file", "path": p} for p in paths]).encode())


def test_a_tree_is_complete_only_with_every_page_and_at_the_root(tmp_path):
    idx = new_index(str(tmp_path))
    k1 = cache_key(T.API_TREE, "model", "o/n", C, "", "recursive=true")
    k2 = cache_key(T.API_TREE, "model", "o/n", C, "", "recursive=true&cursor=2")
    idx.publish(_page(["a.json"], "recursive=true&cursor=2", k1))
    fs = FileSets()
    fs.learn_all(idx)
    assert not fs.knows("model", "o/n", C)                      # page 2 is not cached
    idx.publish(_page(["b/c.json"], key=k2))
    fs.learn(k2, idx.get(k2), idx.get)
    assert fs.missing("model", "o/n", C, "z.json") and not fs.missing("model", "o/n", C, "b/c.json")
    sub = FileSets()
    ks = cache_key(T.API_TREE, "model", "o/n", C, "b", "recursive=true")
    sub.learn(ks, _page(["b/c.json"]), {ks: _page(["b/c.json"])}.get)
    assert not sub.knows("model", "o/n", C)                     # a folder's tree is not the commit's


def test_paths_not_found_from_form_and_json_bodies():
    answer = json.dumps([{"type": "file", "path": "a.json"}, {"type": "directory", "path": "d"}]).encode()
    form = b"paths=a.json&paths=x.py&paths=d&paths=%2Fy.txt&paths=..&expand=False"
    assert paths_not_found("application/x-www-form-urlencoded", form, answer) == ["x.py", "y.txt"]
    body = json.dumps({"paths": ["a.json", "q/r.md"]}).encode()
    assert paths_not_found("application/json", body, answer) == ["q/r.md"]
    assert paths_not_found("application/json", b"{", answer) == []


def test_entry_not_found_is_the_hubs_answer():
    e = entry_not_found("k", C)
    h = dict(e.headers)
    assert e.status == 404 and h["X-Error-Code"] == "EntryNotFound" and h["X-Repo-Commit"] == C
    assert json.loads(e.body) == {"error": h["X-Error-Message"]} == {"error": "Entry not found"}


def test_negatives_drop_the_least_recently_used_beyond_the_cap():
    neg = Negatives(2)
    e = [Entry(CANNED, "k%d" % i, status=404) for i in range(4)]
    assert neg.note(e[0]) == [] and neg.note(e[1]) == []
    assert neg.note(e[0]) == []                   # used again: now the newest
    assert neg.note(e[2]) == ["k1"] and len(neg) == 2
    assert neg.note(Entry(FILE, "k0")) == () and len(neg) == 1     # a positive answer took k0
    assert neg.note(Entry(CANNED, "k9", status=429)) == () and len(neg) == 1   # no rate limits
    assert neg.note(Entry(CANNED, "k8", status=307)) == ()
