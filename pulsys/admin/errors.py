"""Errors of the admin plane's operations, each with the HTTP status it answers with.
The admin API turns one into an HF-style error response; `pulsys keys` into one line
on stderr and exit code 2."""

from pulsys.errors import PulsysError


class AdminError(PulsysError):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


def bad_request(message):
    return AdminError(400, message)


def not_found(message):
    return AdminError(404, message)


def conflict(message):
    return AdminError(409, message)


def forbidden(message):
    return AdminError(403, message)
