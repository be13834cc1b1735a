"""The console end to end in a real headless Chromium: log in with an admin key, start
a pre-warm of a fake-Hub repo from the page, watch the page's progress reach 100 %,
then check the files are warm (the Hub sees no request for them through the data
plane); create a key from the keys page, use it, revoke it from the page."""

import requests
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.admin.browser import log_in
from tests.auth.conftest import admin_url, call

FILES = {"weights.safetensors": bytes(range(256)) * 4096, "config.json": b'{"model_type": "demo"}\n',
         "tokenizer.json": b'{"version": "1.0"}\n'}
WAIT = 30          # seconds any one step in the browser may take


def test_prewarm_from_the_console_and_manage_keys(hub, auth_server, browser):
    hub.add_repo("org/warm", files=FILES)
    server, admin, read = auth_server()
    base = admin_url(server)
    # the jobs page re-renders its table on every poll: an element found just before a
    # re-render is stale when read, so the waits look again instead of failing
    b, wait = browser, WebDriverWait(browser, WAIT, poll_frequency=0.1,
                                     ignored_exceptions=(StaleElementReferenceException,))

    log_in(b, base, admin, wait)
    assert b.find_element(By.TAG_NAME, "h1").text == "Dashboard"

    # pre-warm from the form; the page polls the JSON API and shows the progress
    b.get(base + "/console/jobs")
    b.find_element(By.ID, "repo").send_keys("org/warm")
    b.find_element(By.ID, "start").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#jobs tr[data-job]"))
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#jobs tr[data-job] .pct").text.strip() == "100%")

    def shown(d):        # one reading of the row (None when a re-render made it stale)
        try:
            row = d.find_element(By.CSS_SELECTOR, "#jobs tr[data-job]")
            return (row.find_element(By.CSS_SELECTOR, ".phase").text,
                    row.find_element(By.CSS_SELECTOR, ".files").text,
                    int(row.find_element(By.TAG_NAME, "progress").get_attribute("value")))
        except StaleElementReferenceException:
            return None
    assert wait.until(shown) == ("done", "%d / %d" % (len(FILES), len(FILES)), 100)

    hub.reset_counters()
    for name, body in FILES.items():
        r = requests.get(server.url + "/org/warm/resolve/main/" + name,
                         headers={"Authorization": "Bearer " + read}, timeout=10)
        assert r.status_code == 200 and r.content == body
    assert hub.total_body_bytes() == 0 and hub.count(path_contains="/resolve/") == 0

    # keys: create (the secret is shown once), use, revoke from the page
    b.get(base + "/console/keys")
    b.find_element(By.ID, "key-name").send_keys("from-the-browser")
    b.find_element(By.ID, "create").click()
    secret = wait.until(lambda d: d.find_element(By.ID, "secret")).text.strip()
    assert secret.startswith("hf_pulsys")
    st, _, me = call(base + "/api/v1/whoami", key=secret)
    assert st == 200 and me["scope"] == "read"
    b.get(base + "/console/keys")
    b.find_element(By.CSS_SELECTOR, 'tr[data-key="%s"] button' % me["id"]).click()
    wait.until(lambda d: d.switch_to.alert).accept()
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, 'tr[data-key="%s"] .state' % me["id"]).text == "revoked")
    assert call(base + "/api/v1/whoami", key=secret)[0] == 401
    assert "secret" not in [e.get_attribute("id") for e in b.find_elements(By.ID, "secret")]   # shown once only

    # a key limited to some repos: made on the page, listed with its patterns, and held to them
    b.find_element(By.ID, "key-name").send_keys("only-warm")
    b.find_element(By.ID, "key-repos").send_keys("org/warm, datasets/org/*")
    b.find_element(By.ID, "create").click()
    limited = wait.until(lambda d: d.find_element(By.ID, "secret")).text.strip()
    kid = call(base + "/api/v1/whoami", key=limited)[2]["id"]
    assert b.find_element(By.CSS_SELECTOR, 'tr[data-key="%s"] .repos' % kid).text == "org/warm datasets/org/*"
    name = sorted(FILES)[0]
    r = requests.get(server.url + "/org/warm/resolve/main/" + name,
                     headers={"Authorization": "Bearer " + limited}, timeout=10)
    assert r.status_code == 200 and r.content == FILES[name]
    r = requests.get(server.url + "/org/other/resolve/main/" + name,
                     headers={"Authorization": "Bearer " + limited}, timeout=10)
    assert r.status_code == 404 and r.headers["X-Error-Code"] == "RepoNotFound"
