"""A HEAD and a GET of the same cold regular file, at once: the HEAD checks for the
blob, the GET's fill commits it and publishes the entry with its blob, then the HEAD
publishes its metadata-only entry over it. Or a GET reads the metadata-only entry, the
fill commits and leaves the registry, and the GET finds no fill. Either way the next GET
found no blob in the index and no fill, and asked the Hub for a body that was on disk
(tests/fleet caught it once: a 30-client pull fetched one config.json twice).

The interleaving cannot be forced from outside the process, so the test puts the index in
the state the losing HEAD leaves and checks what the next requests do."""

import hashlib

import requests

BODY = b'{"model_type": "race"}'
SHA1 = hashlib.sha1(b"blob %d\0" % len(BODY) + BODY).hexdigest()


def test_a_blob_on_disk_is_served_when_the_index_entry_lost_it(hub, make_server):
    srv = make_server(hub)
    hub.add_repo("org/race", files={"config.json": BODY}, lfs=set())
    url = srv.url + "/org/race/resolve/main/config.json"
    assert requests.get(url, timeout=30).content == BODY
    held = srv.index.entries_of_blob("sha1/" + SHA1)
    assert held and all(e.blob_path for e in held)
    srv.index.publish_many([e.with_blob(None) for e in held])     # what the losing HEAD left
    hub.reset_counters()
    for _ in range(3):
        assert requests.get(url, timeout=30).content == BODY
    assert hub.body_fetches(SHA1) == 0
    assert all(e.blob_path for e in srv.index.entries_of_blob("sha1/" + SHA1))   # and the index says so again
