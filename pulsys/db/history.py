"""stats_history: what was served, fetched and filled over the last hour and the last
day, in rings of fixed-width buckets (migrations/0004_stats_history.sql).

    RINGS["hour"] = (60, 60)      60 one-minute buckets
    RINGS["day"]  = (900, 96)     96 fifteen-minute buckets

A bucket of width w starting at t (a multiple of w) lives in the row (w, (t / w) mod
capacity). Adding to it resets that row when it still holds an older bucket (the one
`capacity` widths before, now out of the window) and adds to it when it holds this one;
a write for a bucket older than the row's is dropped (a late sample must not wipe a
newer bucket). So each ring is at most `capacity` rows whatever is written, and every
instance sharing a database adds into the same buckets.
"""

RINGS = {"hour": (60, 60), "day": (900, 96)}       # name: (bucket width in seconds, buckets kept)
FIELDS = ("bytes_served", "upstream_body_bytes", "hits", "misses", "fills_started")

_COLUMNS = ", ".join(FIELDS)
_ADD = ("INSERT INTO stats_history (resolution, slot, bucket_start, %s) VALUES (?, ?, ?, %s) "
        "ON CONFLICT (resolution, slot) DO UPDATE SET bucket_start = excluded.bucket_start, %s "
        "WHERE stats_history.bucket_start <= excluded.bucket_start") % (
    _COLUMNS, ", ".join("?" for _ in FIELDS),
    ", ".join("{0} = CASE WHEN stats_history.bucket_start = excluded.bucket_start "
              "THEN stats_history.{0} + excluded.{0} ELSE excluded.{0} END".format(f) for f in FIELDS))


def bucket_of(at, width):
    """The start of the bucket of width `width` seconds that unix time `at` falls in."""
    return int(at) // width * width


def add(tx, at, deltas):
    """Add {field: increment} to the bucket holding unix time `at` in every ring."""
    values = tuple(int(deltas.get(f, 0)) for f in FIELDS)
    for width, capacity in RINGS.values():
        start = bucket_of(at, width)
        tx.execute(_ADD, (width, start // width % capacity, start) + values)


def series(tx, ring, now):
    """The ring's buckets from oldest to the one holding `now`, every one of them:
    [{"start": unix seconds, field: n, ...}], zeros where nothing was recorded."""
    width, capacity = RINGS[ring]
    last = bucket_of(now, width)
    first = last - (capacity - 1) * width
    rows = tx.all("SELECT bucket_start, %s FROM stats_history WHERE resolution = ? "
                  "AND bucket_start >= ? AND bucket_start <= ?" % _COLUMNS, (width, first, last))
    found = {r["bucket_start"]: r for r in rows}
    out = []
    for start in range(first, last + width, width):
        row = found.get(start)
        out.append({"start": start, **{f: int(row[f]) if row else 0 for f in FIELDS}})
    return out
