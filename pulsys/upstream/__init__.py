"""The upstream plane: fill-pool threads that talk to the Hub with `requests` and write
the cache. Never imported by a reactor; reached only through Job/Reply."""
