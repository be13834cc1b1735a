"""Per-repo download tallies (cache/downloads.py) and pre-warm glob selection."""

from pulsys.admin.prewarm import selected
from pulsys.cache.downloads import Downloads, record, repo_of_key
from pulsys.model import target as T
from pulsys.model.key import cache_key


def test_one_packed_int_per_key_carries_count_and_bytes():
    tally, d = {}, Downloads()
    k1 = cache_key(T.RESOLVE, "model", "org/a", "c" * 40, "w.bin")
    k2 = cache_key(T.RESOLVE, "dataset", "org/a", "main", "x|y")
    for n in (10, 1 << 40, 5):
        record(tally, k1, n)
    record(tally, k2, 3)
    d.add(list(tally.items()))
    d.add([(cache_key(T.RESOLVE, "", "", "", ""), 99)])          # no repo: ignored
    assert d.by_repo() == {("model", "org/a"): (3, 15 + (1 << 40)), ("dataset", "org/a"): (1, 3)}
    assert d.take_unsaved() == {("model", "org/a"): [3, 15 + (1 << 40)], ("dataset", "org/a"): [1, 3]}
    assert d.take_unsaved() == {}
    assert repo_of_key(cache_key(T.RESOLVE, "model", "o/we|ird%", "main", "f")) == ("model", "o/we|ird%")


def test_globs_choose_like_allow_and_ignore_patterns():
    paths = ["config.json", "model.safetensors", "onnx/model.onnx", "onnx/sub/x.json", "README.md"]
    assert selected(paths, [], []) == paths
    assert selected(paths, ["*.json"], []) == ["config.json", "onnx/sub/x.json"]
    assert selected(paths, ["onnx/"], ["*.json"]) == ["onnx/model.onnx"]
    assert selected(paths, [], ["*.md", "onnx/*"]) == ["config.json", "model.safetensors"]
