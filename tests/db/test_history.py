"""The throughput history's rings (db/history.py) on a real SQLite file and a real
PostgreSQL database: bounded at their capacity whatever is written, oldest buckets
dropped, increments to one bucket added up, by one instance or by two sharing the
database, and a late write never wiping a newer bucket; and the sampler
(admin/history.py) that writes them from the counters."""

import structlog

from pulsys import metrics as M
from pulsys.admin.history import HistorySampler
from pulsys.db import history
from pulsys.db.database import Database

T0 = 1_800_000_000 // 900 * 900          # a time on both rings' bucket boundaries


def rows(db, width):
    with db.transaction(write=False) as tx:
        return tx.all("SELECT bucket_start, bytes_served FROM stats_history WHERE resolution = ? "
                      "ORDER BY bucket_start", (width,))


def test_writing_past_a_ring_capacity_keeps_it_at_capacity_dropping_the_oldest(db):
    width, capacity = history.RINGS["hour"]
    minutes = capacity + 90
    for i in range(minutes):          # one write per minute, 2.5 rings' worth
        with db.transaction() as tx:
            history.add(tx, T0 + i * width + 7, {"bytes_served": 1000 + i, "hits": 1})
    kept = rows(db, width)
    assert len(kept) == capacity
    assert [r["bucket_start"] for r in kept] == [T0 + i * width for i in range(minutes - capacity, minutes)]
    assert [r["bytes_served"] for r in kept] == [1000 + i for i in range(minutes - capacity, minutes)]
    # the day ring got the same writes in 15-minute buckets: 150 minutes are 10 of them
    day_width, day_capacity = history.RINGS["day"]
    day = rows(db, day_width)
    assert len(day) == 10 <= day_capacity
    assert day[0]["bytes_served"] == sum(1000 + i for i in range(15))

    with db.transaction(write=False) as tx:
        s = history.series(tx, "hour", T0 + (minutes - 1) * width + 30)
    assert len(s) == capacity
    assert s[0]["start"] == T0 + (minutes - capacity) * width and s[-1]["start"] == T0 + (minutes - 1) * width
    assert [b["bytes_served"] for b in s] == [1000 + i for i in range(minutes - capacity, minutes)]
    assert all(b["hits"] == 1 and b["misses"] == 0 for b in s)


def test_a_day_ring_written_for_two_days_holds_one(db):
    width, capacity = history.RINGS["day"]
    for i in range(2 * capacity + 5):
        with db.transaction() as tx:
            history.add(tx, T0 + i * width, {"fills_started": 1})
    assert len(rows(db, width)) == capacity
    # one write every 15 minutes lands in 4 of the hour ring's 60 slots, over and over
    assert len(rows(db, history.RINGS["hour"][0])) == 4


def test_increments_to_one_bucket_add_up_from_two_instances_sharing_the_store(db, db_url):
    other = Database.open(db_url)          # a second pulsys on the same database
    try:
        with db.transaction() as tx:
            history.add(tx, T0 + 5, {"bytes_served": 100, "upstream_body_bytes": 40, "misses": 1})
        with other.transaction() as tx:
            history.add(tx, T0 + 50, {"bytes_served": 23, "hits": 2, "fills_started": 1})
    finally:
        other.close()
    with db.transaction(write=False) as tx:
        last = history.series(tx, "hour", T0 + 59)[-1]
        day_last = history.series(tx, "day", T0 + 59)[-1]
    assert last == {"start": T0, "bytes_served": 123, "upstream_body_bytes": 40, "hits": 2, "misses": 1,
                    "fills_started": 1}
    assert day_last == last


def test_a_late_write_for_an_older_bucket_leaves_the_newer_one_in_its_row_alone(db):
    width, capacity = history.RINGS["hour"]
    newer = T0 + capacity * width           # the same slot as T0, one ring later
    with db.transaction() as tx:
        history.add(tx, newer, {"bytes_served": 5})
    with db.transaction() as tx:
        history.add(tx, T0, {"bytes_served": 999})       # a sample that arrives an hour late
    assert rows(db, width) == [{"bucket_start": newer, "bytes_served": 5}]


def test_a_series_is_dense_and_ends_with_the_bucket_of_now(db):
    with db.transaction() as tx:
        history.add(tx, T0 + 3 * 900 + 1, {"bytes_served": 7})
    with db.transaction(write=False) as tx:
        s = history.series(tx, "day", T0 + 3 * 900 + 899)
        empty = history.series(tx, "hour", T0 - 10 * 3600)
    assert len(s) == history.RINGS["day"][1]
    assert [b["start"] for b in s] == list(range(s[0]["start"], T0 + 3 * 900 + 1, 900))
    assert s[-1]["bytes_served"] == 7 and sum(b["bytes_served"] for b in s) == 7
    assert len(empty) == 60 and not any(b["bytes_served"] for b in empty)


def test_the_sampler_adds_what_the_counters_grew_by_and_keeps_it_while_the_store_fails(db):
    reactor, pool = M.new(), M.new()          # two counter lists, summed as /debug/vars sums them
    now = [T0 + 10.0]
    s = HistorySampler(db, lambda: [reactor, pool], structlog.get_logger("test"), clock=lambda: now[0])
    reactor[M.BYTES_SERVED] += 1000
    pool[M.UPSTREAM_BODY_BYTES] += 400
    reactor[M.CACHE_MISSES] += 1
    pool[M.FILLS_STARTED] += 1
    s.sample()
    reactor[M.BYTES_SERVED] += 500
    reactor[M.CACHE_HITS] += 2
    s.sample()
    s.sample()                                # nothing grew: nothing added
    with db.transaction() as tx:              # the store fails: the table is not there
        tx.execute("ALTER TABLE stats_history RENAME TO stats_history_away")
    now[0] = T0 + 70.0                        # the next minute
    reactor[M.BYTES_SERVED] += 7
    s.sample()
    assert s.unsaved
    with db.transaction() as tx:
        tx.execute("ALTER TABLE stats_history_away RENAME TO stats_history")
    now[0] = T0 + 130.0
    s.stop()                                  # the last sample writes what was kept, in its own minute
    with db.transaction(write=False) as tx:
        hour = history.series(tx, "hour", now[0])
    assert hour[-3] == {"start": T0, "bytes_served": 1500, "upstream_body_bytes": 400, "hits": 2, "misses": 1,
                        "fills_started": 1}
    assert hour[-2]["start"] == T0 + 60 and hour[-2]["bytes_served"] == 7
    assert hour[-1]["bytes_served"] == 0 and not s.unsaved
