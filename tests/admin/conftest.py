from tests.auth.conftest import auth_server  # noqa: F401  (servers with --auth required)
