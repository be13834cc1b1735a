"""HTTP/1.1 wire format: pure, sans-I/O functions over bytes.

This package owns parsing request heads (`parse`), range arithmetic (`ranges`) and
response-head rendering (`heads`). It never imports socket, selectors, os, time or log.
"""
