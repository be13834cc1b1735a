import pytest

from tests.admin.browser import start_browser
from tests.auth.conftest import auth_server  # noqa: F401  (servers with --auth required)


@pytest.fixture
def browser(tmp_path):
    """A headless Chromium (tests/admin/browser.py), quit after the test."""
    b = start_browser(tmp_path)
    yield b
    b.quit()
