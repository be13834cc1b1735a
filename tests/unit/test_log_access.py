import calendar
import io
import json
import time

from pulsys.log import AccessLog, AccessLogWriter


def test_json_access_lines_parse_and_carry_every_field():
    a = AccessLog()
    t0 = time.monotonic()
    a.append((t0, ("GET", '/o/n/resolve/main/"q"\\x', 206, 1000, "hit"), 0.00025))
    a.append((t0, ("HEAD", "/o/n/resolve/main/f", 200, 400, "miss"), 0.01))
    out = io.StringIO()
    AccessLogWriter([a], "json", out).flush()
    lines = [json.loads(l) for l in out.getvalue().splitlines()]
    assert [l["method"] for l in lines] == ["GET", "HEAD"]
    assert lines[0]["path"] == '/o/n/resolve/main/"q"\\x' and lines[0]["status"] == 206
    assert lines[0]["bytes"] == 1000 and lines[0]["cache"] == "hit" and lines[0]["duration_ms"] == 0.25
    assert lines[0]["event"] == "request" and lines[0]["timestamp"].endswith("Z")
    assert abs(time.mktime(time.strptime(lines[0]["timestamp"][:19], "%Y-%m-%dT%H:%M:%S"))
               - time.mktime(time.gmtime())) < 5
    assert not a.buf


def test_console_lines_escape_control_characters_in_paths():
    a = AccessLog()
    a.append((time.monotonic(), ("GET", "/x\n/y", 400, 10, "error"), 0.0))
    out = io.StringIO()
    AccessLogWriter([a], "console", out).flush()
    assert out.getvalue().count("\n") == 1 and "path='/x\\n/y'" in out.getvalue()


def test_buffer_is_bounded():
    a = AccessLog(maxlen=3)
    for i in range(10):
        a.append((0.0, ("GET", "/%d" % i, 200, 0, "hit"), 0.0))
    assert [r[1][1] for r in a.buf] == ["/7", "/8", "/9"]


def test_durations_are_milliseconds_rounded_to_the_microsecond():
    a = AccessLog()
    took = [0.0, 0.0000024, 0.0000026, 0.0123456, 0.0123456, 12.5]   # memoised and not
    for s in took:
        a.append((time.monotonic(), ("GET", "/f", 200, 1, "hit"), s))
    out = io.StringIO()
    AccessLogWriter([a], "json", out).flush()
    text = [l.split('"duration_ms":')[1].split(",")[0] for l in out.getvalue().splitlines()]
    assert text == ["0.000", "0.002", "0.003", "12.346", "12.346", "12500.000"]


def test_percent_signs_in_paths_are_written_as_sent():
    # request targets are percent-encoded: the per-key format strings must not read them
    for fmt in ("json", "console"):
        a = AccessLog()
        a.append((time.monotonic(), ("GET", "/o/n/resolve/main/a%20b%s%d%%", 200, 7, "hit"), 0.001))
        out = io.StringIO()
        AccessLogWriter([a], fmt, out).flush()
        line = out.getvalue()
        assert line.count("\n") == 1
        if fmt == "json":
            assert json.loads(line)["path"] == "/o/n/resolve/main/a%20b%s%d%%"
        else:
            assert "path=/o/n/resolve/main/a%20b%s%d%% status=200" in line and "duration_ms=1.000 " in line


def test_timestamps_follow_the_records_across_seconds():
    a = AccessLog()
    t0 = time.monotonic()
    n = 1031                                  # 10 ms apart: across ten seconds and more
    for i in range(n):
        a.append((t0 + i * 0.01, ("GET", "/f%d" % (i % 3), 200, i, "hit"), i * 1e-6))
    out = io.StringIO()
    before = time.time()
    AccessLogWriter([a], "json", out).flush()
    lines = [json.loads(l) for l in out.getvalue().splitlines()]
    assert len(lines) == n and [l["bytes"] for l in lines] == list(range(n))
    assert [l["path"] for l in lines[:4]] == ["/f0", "/f1", "/f2", "/f0"]
    stamps = [calendar.timegm(time.strptime(l["timestamp"][:19], "%Y-%m-%dT%H:%M:%S"))
              + int(l["timestamp"][20:26]) / 1e6 for l in lines]
    # the wall clock of each record, 10 ms apart, within a few ms of now
    assert all(abs((b - a) - 0.01) < 2e-6 for a, b in zip(stamps, stamps[1:]))
    assert abs(stamps[0] - (before - (time.monotonic() - t0))) < 0.5
    assert lines[5]["duration_ms"] == 0.005


def test_lines_formatted_by_the_reactor_and_by_the_writer_keep_record_order():
    a = AccessLog()
    a.format_ready()                          # no writer yet: nothing formatted, nothing lost
    t0 = time.monotonic()
    for i in range(AccessLog.BATCH + 3):
        a.append((t0, ("GET", "/r%d" % i, 200, i, "hit"), 0.0))
    out = io.StringIO()
    w = AccessLogWriter([a], "json", out)
    a.format_ready()                          # what the reactor does at the end of a turn
    assert not a.buf and len(a.chunks) == 1 and out.getvalue() == ""   # written by the writer only
    for i in range(AccessLog.BATCH + 3, AccessLog.BATCH + 10):
        a.append((t0, ("GET", "/r%d" % i, 200, i, "hit"), 0.0))
    w.flush()                                 # the chunk, then the records left
    paths = [json.loads(l)["path"] for l in out.getvalue().splitlines()]
    assert paths == ["/r%d" % i for i in range(AccessLog.BATCH + 10)]
    assert not a.chunks and not a.buf


class _Answer:
    """What AccessLog.add_turns reads of a warm.Answer."""
    def __init__(self, log):
        self.log, self.logpart = log, None


def test_a_turn_of_fused_hits_is_one_text_of_one_line_each_in_order():
    a = AccessLog()
    t0 = time.monotonic()
    a.append((t0 - 0.5, ("GET", "/before", 200, 1, "miss"), 0.002))
    two = [_Answer(("GET", "/f%d" % i, 200, 4200 + i, "hit")) for i in range(2)]
    answers = two + two                  # a turn's hits: the same few Answers, in request order
    out = io.StringIO()
    w = AccessLogWriter([a], "json", out)
    a.add_turns(answers, [(t0, 0.000123, len(answers))], dict.fromkeys(answers))
    a.append((t0 + 0.5, ("GET", "/after", 200, 1, "hit"), 0.0))
    assert a.buffered() == 6 and len(a.buf) == 3
    w.flush()
    lines = [json.loads(l) for l in out.getvalue().splitlines()]
    assert [l["path"] for l in lines] == ["/before", "/f0", "/f1", "/f0", "/f1", "/after"]
    turn = lines[1:5]
    assert [l["bytes"] for l in turn] == [4200, 4201, 4200, 4201]
    assert {l["duration_ms"] for l in turn} == {0.123} and len({l["timestamp"] for l in turn}) == 1
    assert turn[0]["timestamp"] != lines[0]["timestamp"] and a.buffered() == 0
    assert all(x.logpart is not None for x in two) and two[0].logpart != two[1].logpart


def test_a_turn_in_console_format_and_before_a_writer_exists():
    a = AccessLog()
    t0 = time.monotonic()
    early = [_Answer(("GET", "/early", 200, 7, "hit"))]
    a.add_turns(early, [(t0, 0.001, 1)], early)                           # no writer yet
    assert a.buffered() == 1 and a.buf[0][1][1] == "/early"
    out = io.StringIO()
    w = AccessLogWriter([a], "console", out)
    xs = [_Answer(("GET", "/x%d" % i, 200, 7, "hit")) for i in range(2)]
    a.add_turns(xs, [(t0, 0.001, 2)], xs)
    w.flush()
    got = out.getvalue().splitlines()
    assert len(got) == 3 and all("duration_ms=1.000 " in l and " status=200" in l for l in got)
    assert [l.split("path=")[1].split()[0] for l in got] == ["/early", "/x0", "/x1"]
    assert got[1].split(" [info")[0] == got[2].split(" [info")[0]    # one timestamp per turn


def test_turns_folded_together_keep_each_turns_time_and_duration():
    # three turns in one add_turns: lines in request order, each turn its own timestamp
    # and duration, the same Answer logged in two turns with that turn's
    for fmt in ("json", "console"):
        a = AccessLog()
        t0 = time.monotonic()
        f = [_Answer(("GET", "/f%d" % i, 200, 10 + i, "hit")) for i in range(2)]
        answers = [f[0], f[1], f[0], f[1], f[1]]
        marks = [(t0, 0.000200, 2), (t0 + 0.25, 0.000300, 3), (t0 + 0.5, 0.003, 5)]
        out = io.StringIO()
        w = AccessLogWriter([a], fmt, out)
        a.add_turns(answers, marks, dict.fromkeys(answers))
        assert a.buffered() == 5
        w.flush()
        got = out.getvalue().splitlines()
        assert len(got) == 5
        if fmt == "json":
            lines = [json.loads(l) for l in got]
            paths = [l["path"] for l in lines]
            durs = [l["duration_ms"] for l in lines]
            stamps = [l["timestamp"] for l in lines]
        else:
            paths = [l.split("path=")[1].split()[0] for l in got]
            durs = [float(l.split("duration_ms=")[1].split()[0]) for l in got]
            stamps = [l.split(" [info")[0] for l in got]
        assert paths == ["/f0", "/f1", "/f0", "/f1", "/f1"]
        assert durs == [0.2, 0.2, 0.3, 3.0, 3.0]
        assert stamps[0] == stamps[1] and stamps[2] != stamps[1] and stamps[3] == stamps[4] != stamps[2]
        assert stamps == sorted(stamps)


def test_turns_before_a_writer_exists_are_records_of_their_own_turn():
    a = AccessLog()
    t0 = time.monotonic()
    x, y = _Answer(("GET", "/x", 200, 1, "hit")), _Answer(("GET", "/y", 200, 1, "hit"))
    a.add_turns([x, y, x], [(t0, 0.001, 1), (t0 + 1, 0.002, 3)], [x, y])
    assert [(r[0] - t0, r[1][1], r[2]) for r in a.buf] == [(0, "/x", 0.001), (1, "/y", 0.002), (1, "/x", 0.002)]
