import os
import threading

from pulsys.reactor.fdcache import FdCache
from pulsys.reactor.mailbox import Mailbox


def test_mailbox_runs_posts_from_other_threads_on_drain():
    mb = Mailbox()
    got = []
    threads = [threading.Thread(target=lambda i=i: [mb.post(got.append, (i, j)) for j in range(100)])
               for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert mb.rsock.recv(10)   # signalled
    n = 0
    while n < 400:
        n += mb.drain(cap=1000)
    assert sorted(got) == sorted((i, j) for i in range(4) for j in range(100))
    mb.close()


def test_mailbox_drain_cap_leaves_work_signalled():
    mb = Mailbox()
    for i in range(10):
        mb.post(lambda _: None, i)
    assert mb.drain(cap=3) == 3
    assert mb.drain(cap=100) == 7
    mb.close()


def test_fdcache_reuses_and_closes_evicted_fds_after_release(tmp_path):
    paths = []
    for i in range(3):
        p = tmp_path / str(i)
        p.write_bytes(b"x")
        paths.append(str(p))
    fc = FdCache(capacity=2)
    fd0 = fc.acquire(paths[0])
    assert fc.acquire(paths[0]) == fd0
    fc.release(paths[0], fd0)
    fd1 = fc.acquire(paths[1])
    fd2 = fc.acquire(paths[2])            # evicts paths[0], still referenced once
    os.fstat(fd0)                          # not closed while in use
    fc.release(paths[0], fd0)
    try:
        os.fstat(fd0)
        closed = False
    except OSError:
        closed = True
    assert closed
    fc.release(paths[1], fd1)
    fc.release(paths[2], fd2)
    fc.close_all()


def test_no_wakeup_is_lost_under_concurrent_posts():
    """The reactor drains only when the wake-up socket is readable; if a post could
    leave items queued with no byte pending, the loop below would time out."""
    import selectors
    mb = Mailbox()
    sel = selectors.DefaultSelector()
    sel.register(mb.rsock, selectors.EVENT_READ)
    total, done = 4 * 8000, []
    lost = []

    def reactor():
        while len(done) < total:
            if not sel.select(2.0):
                lost.append(len(done))
                return
            mb.drain(cap=7)

    def poster():
        for i in range(8000):
            mb.post(done.append, i)
            if i % 64 == 0:
                time.sleep(0)
    import sys
    import time
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)   # switch threads as often as possible to expose races
    try:
        rt = threading.Thread(target=reactor)
        rt.start()
        ps = [threading.Thread(target=poster) for _ in range(4)]
        for p in ps:
            p.start()
        for p in ps:
            p.join()
        rt.join(30)
    finally:
        sys.setswitchinterval(old)
    sel.close()
    mb.close()
    assert not lost, "wake-up lost with %d of %d delivered" % (lost[0], total)
    assert len(done) == total
