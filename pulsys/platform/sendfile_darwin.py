"""Head + body on macOS: one sendfile(2) with the head in sf_hdtr.

CPython's os.sendfile(out, in, offset, count, headers=[...]) fills struct sf_hdtr on
macOS and FreeBSD (os module docs). sendfile(2) on macOS: "the number of bytes sent
... includes the header bytes", sent before any file bytes; on EAGAIN with a
non-blocking socket it still reports the bytes it sent, which CPython returns instead
of raising. So a return of n means min(n, len(head)) head bytes, then body bytes.
Same contract as sendfile_linux; plus send_head_and_body for the fused call.
"""

import os
import sys

if sys.platform != "darwin":
    raise ImportError("sendfile_darwin is macOS only")

from pulsys.platform.sendfile_portable import send_head  # noqa: E402,F401  (same on macOS)

_sendfile = os.sendfile


def send_body(out_fd, file_fd, offset, count):
    try:
        n = _sendfile(out_fd, file_fd, offset, count)
    except BlockingIOError:
        return 0
    return n if n else -1


def split_sent(n, head_len):
    """Bytes reported by sendfile with headers -> (head bytes, body bytes)."""
    h = n if n < head_len else head_len
    return h, n - h


def send_head_and_body(sock, head, out_fd, file_fd, offset, count):
    """-> (head bytes sent, body bytes sent); (0, 0) when the socket is full."""
    try:
        n = _sendfile(out_fd, file_fd, offset, count, headers=[head])
    except BlockingIOError:
        return 0, 0
    return split_sent(n, len(head))
