"""counters: named BIGINT totals. Besides the `keys` generation (keys.py), per-repo
download statistics live here so they outlast a restart (cache/downloads.py):

    repo.downloads|<type>|<repo>    GETs answered with a file of that repo
    repo.bytes|<type>|<repo>        bytes those answers carried
"""

DOWNLOADS, BYTES = "repo.downloads|", "repo.bytes|"


def add(tx, deltas):
    """{name: increment}: create or add, in one statement per name (SQLite >= 3.24 and
    Postgres both have INSERT ... ON CONFLICT)."""
    for name, n in deltas.items():
        tx.execute("INSERT INTO counters (name, value) VALUES (?, ?) "
                   "ON CONFLICT (name) DO UPDATE SET value = counters.value + excluded.value", (name, int(n)))


def with_prefix(tx, prefix):
    """{name: value} of every counter whose name starts with `prefix`."""
    rows = tx.all("SELECT name, value FROM counters WHERE name >= ? AND name < ?", (prefix, prefix + "\uffff"))
    return {r["name"]: r["value"] for r in rows}


def add_repo_stats(tx, per_repo):
    """{(type, repo): (downloads, bytes)} -> added to the repo counters."""
    deltas = {}
    for (rtype, repo), (n, b) in per_repo.items():
        deltas[DOWNLOADS + rtype + "|" + repo] = n
        deltas[BYTES + rtype + "|" + repo] = b
    add(tx, deltas)


def repo_stats(tx):
    """-> {(type, repo): (downloads, bytes)} as saved."""
    out = {}
    for prefix, i in ((DOWNLOADS, 0), (BYTES, 1)):
        for name, v in with_prefix(tx, prefix).items():
            rtype, _, repo = name[len(prefix):].partition("|")
            out.setdefault((rtype, repo), [0, 0])[i] = v
    return {k: tuple(v) for k, v in out.items()}
