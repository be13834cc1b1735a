"""Console sessions (pulsys/admin/sessions.py): only the id's digest is kept, idle and
absolute expiry, logout, a bounded table."""

from pulsys.admin import sessions as S


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_sessions_expire_when_idle_or_old_and_keep_only_a_digest():
    clock = Clock()
    ss = S.Sessions(clock)
    sid, s = ss.create("abc123abc123")
    assert sid not in repr(ss.by_digest) and ss.get(sid) is s and ss.get(sid + "x") is None
    clock.t += S.IDLE - 1
    assert ss.get(sid) is s                    # a request slides the idle limit
    clock.t += S.IDLE + 1
    assert ss.get(sid) is None and len(ss) == 0
    sid, s = ss.create("abc123abc123")
    for _ in range(int(S.ABSOLUTE // (S.IDLE / 2)) + 1):
        clock.t += S.IDLE / 2
        ss.get(sid)
    assert ss.get(sid) is None                 # active, but logged in too long ago
    sid, _ = ss.create("k")
    ss.drop(sid)
    assert ss.get(sid) is None and ss.get(None) is None


def test_the_table_is_bounded_and_tokens_compare_in_constant_time():
    ss = S.Sessions(Clock())
    first, _ = ss.create("k")
    for _ in range(S.MAX_SESSIONS):
        ss.create("k")
    assert len(ss) == S.MAX_SESSIONS and ss.get(first) is None
    assert S.same_token("a", "a") and not S.same_token("a", "b")
    assert not S.same_token(None, None) and not S.same_token("", "")
