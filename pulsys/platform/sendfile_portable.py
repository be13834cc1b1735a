"""Head + body anywhere: send(head) then pread + write. The byte-exact oracle for tests
and the fallback where os.sendfile is missing. Same contract as sendfile_linux."""

import os

_CHUNK = 256 * 1024


def send_head(sock, view, more):
    try:
        return sock.send(view)
    except BlockingIOError:
        return 0


def send_body(out_fd, file_fd, offset, count):
    data = os.pread(file_fd, min(count, _CHUNK), offset)
    if not data:
        return -1
    try:
        return os.write(out_fd, data)
    except BlockingIOError:
        return 0
