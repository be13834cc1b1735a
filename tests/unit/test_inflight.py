import threading

from pulsys.cache.inflight import DONE, FAILED, Inflight


def test_join_or_create_shares_one_fill():
    inf = Inflight()
    a, created_a = inf.join_or_create("sha256/x", 10, lambda: "/p1")
    b, created_b = inf.join_or_create("sha256/x", 10, lambda: "/p2")
    assert created_a and not created_b and a is b and a.part_path == "/p1"
    inf.done(a)
    c, created_c = inf.join_or_create("sha256/x", 10, lambda: "/p3")
    assert created_c and c is not a


def test_last_byte_is_held_back_until_finish():
    f, _ = Inflight().join_or_create("b", 10, lambda: "/p")
    f.progress(10)
    assert f.available == 9
    f.finish(object())
    assert f.available == 10 and f.state == DONE


def test_waiters_are_woken_once_on_progress_and_not_lost():
    f, _ = Inflight().join_or_create("b", 100, lambda: "/p")
    got = []

    def post(fn, arg):
        fn(arg)
    assert f.wait(0, post, got.append, "w1") is True
    f.progress(5)
    assert got == ["w1"]
    assert f.wait(0, post, got.append, "w2") is False    # bytes are there: send now
    assert f.wait(5, post, got.append, "w3") is True
    f.fail(RuntimeError("x"))
    assert got == ["w1", "w3"] and f.state == FAILED
    assert f.wait(5, post, got.append, "w4") is False


def test_concurrent_progress_and_waits_lose_no_wakeup():
    f, _ = Inflight().join_or_create("b", 10001, lambda: "/p")
    woke = threading.Semaphore(0)

    def post(fn, arg):
        fn(arg)

    def writer():
        for i in range(1, 10001):
            f.progress(i)
        f.finish(object())
    t = threading.Thread(target=writer)
    t.start()
    off = 0
    while off < 10001:
        if f.available > off:
            off = f.available
            continue
        if f.state != 0:
            break
        if f.wait(off, post, lambda _: woke.release(), None):
            assert woke.acquire(timeout=5), "lost wake-up"
    t.join()
    assert f.available == 10001
