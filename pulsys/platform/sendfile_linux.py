"""Head + body on Linux: send(head, MSG_MORE) then sendfile(2).

MSG_MORE (send(2)) tells TCP more data follows, so the head and the first body bytes
leave in one segment without the two extra setsockopt calls TCP_CORK needs; the
sendfile that ends the body pushes the data out. Measured against TCP_CORK in
scripts/bench_head_body.py (results/ file linked from docs/internals.md).

Both functions take non-blocking sockets and never raise BlockingIOError: they return
the number of bytes sent (possibly 0), and the caller waits for writability.
"""

import os
import socket
import sys

if not sys.platform.startswith("linux"):
    raise ImportError("sendfile_linux is Linux only")

MSG_MORE = socket.MSG_MORE
_sendfile = os.sendfile


def send_head(sock, view, more):
    """Send as much of `view` as the socket takes; MSG_MORE when a body follows."""
    try:
        return sock.send(view, MSG_MORE if more else 0)
    except BlockingIOError:
        return 0


def send_body(out_fd, file_fd, offset, count):
    """sendfile up to `count` bytes from `file_fd` at `offset`; 0 when it would block.
    Returns -1 at EOF (the file is shorter than promised)."""
    try:
        n = _sendfile(out_fd, file_fd, offset, count)
    except BlockingIOError:
        return 0
    return n if n else -1
