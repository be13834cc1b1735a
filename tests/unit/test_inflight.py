import random
import threading

from pulsys.cache import spans as S
from pulsys.cache.inflight import DONE, FAILED, NEAR, RUNNING, Fill, Inflight


def now(fn, arg):
    fn(arg)


def fetch(f, piece):
    """Write a whole claimed piece in one go; -> wrote()'s result."""
    start, end = piece
    return f.wrote(piece, end - start)


def test_join_or_create_shares_one_fill():
    inf = Inflight()
    a, created_a = inf.join_or_create("sha256/x", 10, lambda: "/p1")
    b, created_b = inf.join_or_create("sha256/x", 10, lambda: "/p2")
    assert created_a and not created_b and a is b and a.part_path == "/p1"
    inf.done(a)
    c, created_c = inf.join_or_create("sha256/x", 10, lambda: "/p3")
    assert created_c and c is not a


def test_spans_merge_and_answer_queries():
    s = S.add(S.add(S.add((), 10, 20), 30, 40), 20, 30)
    assert s == ((10, 40),)
    s = S.add(s, 0, 5)
    assert s == ((0, 5), (10, 40))
    assert S.end_at(s, 3) == 5 and S.end_at(s, 5) == 5 and S.end_at(s, 12) == 40
    assert S.first_gap(s, 0, 50) == 5 and S.first_gap(s, 10, 50) == 40
    assert S.first_gap(((0, 50),), 0, 50) is None
    assert S.next_start(s, 5, 50) == 10 and S.next_start(s, 10, 50) == 50


def test_last_byte_is_held_back_until_finish():
    f = Fill("b", 10, "/p")
    assert fetch(f, f.claim(None, 0, 100, 100)) is True
    assert f.readable(0) == 9 and f.readable(4) == 5 and f.readable(9) <= 0
    f.finish(object())
    assert f.readable(0) == 10 and f.readable(9) == 1 and f.state == DONE


def test_a_reader_gets_only_bytes_contiguous_from_its_offset():
    f = Fill("b", 100, "/p")
    a = f.claim(None, 0, 20, 20)
    b = f.claim(None, 50, 20, 20)
    assert (a, b) == ([0, 20], [50, 70])
    f.wrote(b, 10)
    assert f.readable(0) <= 0 and f.readable(50) == 10 and f.readable(55) == 5 and f.readable(60) <= 0
    f.wrote(a, 20)
    assert f.readable(0) == 20 and f.readable(20) <= 0


def test_waiters_wake_when_their_offset_becomes_readable_and_never_twice():
    f = Fill("b", 100, "/p")
    a = f.claim(None, 0, 40, 40)
    b = f.claim(None, 60, 40, 40)
    got = []
    assert f.wait(0, now, got.append, "at0") is True
    assert f.wait(60, now, got.append, "at60") is True
    f.wrote(b, 5)
    assert got == ["at60"]                       # the reader at 0 has nothing yet
    assert f.wait(60, now, got.append, "again") is False    # bytes are there: send now
    f.wrote(a, 1)
    assert got == ["at60", "at0"]
    assert f.wait(65, now, got.append, "at65") is True
    f.fail(RuntimeError("x"))
    assert got == ["at60", "at0", "at65"] and f.state == FAILED
    assert f.readable(0) == 0 and f.wait(65, now, got.append, "late") is False


def test_a_wait_where_nobody_fetches_is_a_demand_once():
    f = Fill("b", 1000, "/p")
    asked = []
    f.on_demand = lambda fill, off: asked.append(off)
    f.claim(None, 0, 100, 100)
    assert f.wait(50, now, lambda _: None, None)           # inside a busy piece
    assert f.wait(100, now, lambda _: None, None)          # where that fetcher goes on
    assert asked == []
    assert f.wait(500, now, lambda _: None, None) and f.wait(500, now, lambda _: None, None)
    f.demand(500)
    assert asked == [500]                                  # one demand per offset
    assert f.claim(None, None, 100, 100) == [500, 600]     # a new fetcher takes the wanted offset
    f.demand(550)
    assert asked == [500] and f.wanted == ()


def test_claims_prefer_going_on_then_wanted_then_the_first_gap_and_never_overlap():
    f = Fill("b", 1000, "/p")
    f.on_demand = lambda fill, off: None
    a = f.claim(None, 0, 100, 100)
    b = f.claim(None, 150, 100, 100)
    assert (a, b) == ([0, 100], [150, 250])
    f.demand(700)
    fetch(f, a)
    c = f.claim(a, a[1], 200, 100)
    assert c == [100, 150]                                  # goes on, stops at the claimed piece
    fetch(f, c)
    d = f.claim(c, 150, 200, 100)
    assert d == [700, 800]                                  # 150 is busy: the wanted offset
    fetch(f, d)
    e = f.claim(d, 800, 400, 100)
    assert e == [800, 1000]                                 # goes on, to the end of the file
    fetch(f, e)
    assert f.claim(e, 1000, 400, 100) == [250, 350]         # then the first gap from 0
    assert f.busy == ([150, 250], [250, 350])


def test_random_fetchers_cover_the_file_exactly_once_and_one_write_completes_it():
    rng = random.Random(7)
    size = 10_000
    f = Fill("b", size, "/p")
    f.on_demand = lambda fill, off: None
    on_disk = bytearray(size)
    fetchers = [[None, rng.randrange(size)] for _ in range(5)]    # [busy piece, next start]
    completions = 0
    while fetchers:
        fe = rng.choice(fetchers)
        if rng.random() < 0.2:
            f.demand(rng.randrange(size))
        piece = f.claim(fe[0], fe[1], rng.randrange(1, 900), rng.randrange(1, 300))
        if piece is None:
            fetchers.remove(fe)
            continue
        start, end = piece
        for pos in range(start, end, 97):
            n = min(97, end - pos)
            for i in range(pos, pos + n):
                on_disk[i] += 1
            completions += f.wrote(piece, n)
        fe[0], fe[1] = piece, end
    assert set(on_disk) == {1}              # every byte written, none twice
    assert completions == 1 and f.spans == ((0, size),) and f.state == RUNNING


def test_a_worker_copy_takes_snapshots_wakes_readers_and_forgets_covered_demands():
    owner = Fill("b", 100, "/p")
    copy = Fill("b", 100, "/p")
    asked, got = [], []
    copy.on_demand = lambda fill, off: asked.append(off)
    a = owner.claim(None, 0, 30, 30)
    copy.apply(*owner.snapshot())
    assert copy.wait(10, now, got.append, "r10") and asked == []        # busy at the owner
    assert copy.wait(80, now, got.append, "r80") and asked == [80]
    owner.wrote(a, 20)
    copy.apply(*owner.snapshot())
    assert got == ["r10"] and copy.readable(10) == 10
    owner.claim(None, 80, 20, 20)
    copy.apply(*owner.snapshot())
    assert copy.wanted == ()


def test_concurrent_writes_and_waits_lose_no_wakeup():
    size = 10001
    f = Fill("b", size, "/p")
    woke = threading.Semaphore(0)
    piece = f.claim(None, 0, size, size)

    def writer():
        for i in range(size):
            f.wrote(piece, 1)
        f.finish(object())
    t = threading.Thread(target=writer)
    t.start()
    off = 0
    while off < size:
        n = f.readable(off)
        if n > 0:
            off += n
            continue
        if f.state != RUNNING:
            break
        if f.wait(off, now, lambda _: woke.release(), None):
            assert woke.acquire(timeout=5), "lost wake-up"
    t.join()
    assert off == size and f.state == DONE


def test_a_reader_far_ahead_of_a_fetcher_in_its_piece_cuts_the_piece_and_gets_its_own():
    size = 64 * NEAR
    f = Fill("b", size, "/p")
    asked = []
    f.on_demand = lambda fill, off: asked.append(off)
    a = f.claim(None, 0, 32 * NEAR, 32 * NEAR)
    f.wrote(a, NEAR // 2)
    assert f.wait(NEAR, now, lambda _: None, None) and asked == []     # near its fetcher: coming
    far = 10 * NEAR
    assert f.wait(far, now, lambda _: None, None) and asked == [far]   # far ahead: a demand
    b = f.claim(None, None, 2 * NEAR, 2 * NEAR)
    assert b == [far, far + 2 * NEAR] and a == [NEAR // 2, far]       # a now ends where b starts
    assert f.wanted == ()
    # a's fetcher stops at its new end; whatever goes on from there finds b's bytes taken
    fetch(f, a)
    c = f.claim(a, a[1], 4 * NEAR, NEAR)
    assert c == [far + 2 * NEAR, far + 3 * NEAR]                        # the first free byte
    assert f.busy == (b, c)


def test_the_wanted_offset_is_not_cut_when_its_fetcher_got_near_meanwhile():
    f = Fill("b", 64 * NEAR, "/p")
    f.on_demand = lambda fill, off: None
    a = f.claim(None, 0, 32 * NEAR, 32 * NEAR)
    assert f.wait(3 * NEAR, now, lambda _: None, None) and f.wanted == (3 * NEAR,)
    f.wrote(a, 2 * NEAR)                          # the fetcher is NEAR away now
    assert f.claim(None, None, NEAR, NEAR) == [32 * NEAR, 33 * NEAR]   # no cut: the first gap
    assert a == [2 * NEAR, 32 * NEAR] and f.wanted == ()


def test_pieces_of_a_fill_that_cannot_cut_are_never_cut():
    f = Fill("b", 64 * NEAR, "/p")
    f.cuts = False                                # a 200 to a request without Range
    asked = []
    f.on_demand = lambda fill, off: asked.append(off)
    a = f.claim(None, 0, 64 * NEAR, 64 * NEAR)
    assert f.wait(40 * NEAR, now, lambda _: None, None) and asked == []
    assert f.claim(None, None, NEAR, NEAR) is None and a == [0, 64 * NEAR]


def test_cut_pieces_still_cover_the_file_exactly_once_and_one_write_completes_it():
    rng = random.Random(11)
    size = 40 * NEAR
    f = Fill("b", size, "/p")
    f.on_demand = lambda fill, off: None
    written, completions, cuts = [], 0, 0
    fetchers = [{"piece": None, "after": 0, "claimed_end": None}]
    while fetchers:
        fe = rng.choice(fetchers)
        piece = fe["piece"]
        if piece is None or piece[0] >= piece[1]:
            piece = fe["piece"] = f.claim(piece, fe["after"], rng.choice((NEAR, 8 * NEAR)), NEAR)
            if piece is None:
                fetchers.remove(fe)
                continue
            fe["claimed_end"] = piece[1]
        n = min(rng.randrange(1, NEAR // 2), piece[1] - piece[0])
        written.append((piece[0], piece[0] + n))
        completions += f.wrote(piece, n)
        fe["after"] = piece[1]
        if piece[1] < fe["claimed_end"]:
            cuts, fe["claimed_end"] = cuts + 1, piece[1]
        if rng.random() < 0.1 and f.state == RUNNING:
            f.demand(rng.randrange(size))          # a reader somewhere, maybe far inside a piece
            if len(fetchers) < 8:
                fetchers.append({"piece": None, "after": None, "claimed_end": None})
    written.sort()
    assert all(a[1] <= b[0] for a, b in zip(written, written[1:]))   # no byte twice
    assert sum(b - a for a, b in written) == size and f.spans == ((0, size),)
    assert completions == 1 and cuts > 0
