"""Per-reactor cache of open blob file descriptors (no locks: one owner thread).

sendfile with an explicit offset never moves the file position, so one fd serves every
connection of the reactor. An fd evicted while a connection still sends from it is
closed when that connection releases it.
"""

import collections
import errno
import os


class FdCache:
    def __init__(self, capacity=1024):
        self.capacity = capacity
        self._fds = collections.OrderedDict()   # path -> [fd, refs]
        self._doomed = {}                       # fd -> refs, evicted while in use

    def acquire(self, path, size=None):
        """An fd of `path`. A file opened now that does not have `size` bytes (when given)
        raises OSError(EIO): the index says it holds a verified blob of that size, and a
        file of another size there was changed by something other than pulsys."""
        rec = self._fds.get(path)
        if rec is not None:
            self._fds.move_to_end(path)
            rec[1] += 1
            return rec[0]
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        if size is not None and os.fstat(fd).st_size != size:
            os.close(fd)
            raise OSError(errno.EIO, "blob has the wrong size", path)
        self._fds[path] = [fd, 1]
        if len(self._fds) > self.capacity:
            self._evict()
        return fd

    def release(self, path, fd):
        rec = self._fds.get(path)
        if rec is not None and rec[0] == fd:
            rec[1] -= 1
            return
        refs = self._doomed.get(fd)
        if refs is not None:
            if refs <= 1:
                del self._doomed[fd]
                os.close(fd)
            else:
                self._doomed[fd] = refs - 1

    def _evict(self):
        while len(self._fds) > self.capacity:
            path, (fd, refs) = self._fds.popitem(last=False)
            if refs:
                self._doomed[fd] = refs
            else:
                os.close(fd)

    def forget(self, paths):
        """These files were unlinked (evicted): close their idle fds now, and in-use ones
        when their last connection releases them, so the space comes back."""
        for path in paths:
            rec = self._fds.pop(path, None)
            if rec is not None:
                if rec[1]:
                    self._doomed[rec[0]] = rec[1]
                else:
                    os.close(rec[0])

    def close_all(self):
        for fd, _ in self._fds.values():
            os.close(fd)
        self._fds.clear()
