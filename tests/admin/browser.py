"""A headless Chromium for console tests: Debian's `chromium` and `chromium-driver`,
installed with apt-get when missing and the tests run as root (as CI does); driven by
Selenium. A machine that cannot have them fails the test: the console's end-to-end test
is not optional."""

import shutil
import tempfile

import pytest

from tests.debian import apt_install

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1280,900")


def _paths():
    return shutil.which("chromium"), shutil.which("chromedriver")


def ensure_chromium():
    """(chromium, chromedriver) paths; apt-get installs them when missing and possible."""
    if all(_paths()):
        return _paths()
    log = apt_install(["chromium", "chromium-driver"], 600)
    if not all(_paths()):
        pytest.fail("the console's end-to-end test needs Debian's chromium and chromium-driver: "
                    "apt-get install chromium chromium-driver (as root)\n" + log)
    return _paths()


def start_browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    chromium, driver = ensure_chromium()
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for f in CHROMIUM_FLAGS:
        opts.add_argument(f)
    opts.add_argument("--user-data-dir=" + tempfile.mkdtemp(prefix="chromium-", dir=str(tmp_path)))
    b = webdriver.Chrome(service=Service(executable_path=driver), options=opts)
    b.set_page_load_timeout(20)
    b.set_script_timeout(10)
    return b


def log_in(b, base, key, wait):
    """Log the browser b in to the console at base with key; -> on the dashboard."""
    from selenium.webdriver.common.by import By
    b.get(base + "/console/login")
    b.find_element(By.ID, "key").send_keys(key)
    b.find_element(By.ID, "login").click()
    wait.until(lambda d: d.current_url.endswith("/console/"))


# Run in every page before its own scripts (Chromium's DevTools protocol, which the page's
# Content-Security-Policy does not apply to): every CSP violation the page reports lands in
# window.cspViolations (the `securitypolicyviolation` event, CSP Level 3 §5.3).
WATCH_CSP = ("window.cspViolations = [];"
             "document.addEventListener('securitypolicyviolation', function (e) {"
             "  window.cspViolations.push(e.violatedDirective + ' ' + e.blockedURI); });")


def watch_csp(b):
    b.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WATCH_CSP})
