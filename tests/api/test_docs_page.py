"""``/docs``: the API reference renders every operation in a real headless Chromium with no request
leaving the gateway's origin (the browser is also told that every other host does not resolve).

The gateway is the real app under uvicorn with API keys set: the page and ``/openapi.json`` answer
without one, as the reference holds no data.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.api.support import ApiServer, RedisServer
from tests.api.test_ui_browser import CHROMEDRIVER, CHROMIUM, CHROMIUM_FLAGS, INSTALL_HINT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# URL schemes a browser request leaves the machine with (everything else is served by the browser).
NETWORK_SCHEMES = frozenset({"http", "https", "ws", "wss", "ftp"})


@pytest.fixture(scope="module")
def offline_browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip(INSTALL_HINT)
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the dev extra")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    home = tmp_path_factory.mktemp("chromium-docs")
    options = Options()
    options.binary_location = CHROMIUM
    # Offline: no host but the loopback gateway resolves.
    flags = [*CHROMIUM_FLAGS, f"--user-data-dir={home / 'profile'}"]
    flags.append("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1")
    for flag in flags:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    service = Service(executable_path=CHROMEDRIVER, log_output=str(home / "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=options)
    try:
        yield driver
    finally:
        driver.quit()


def test_docs_renders_every_operation_offline(
    api: ApiServer, redis_server: RedisServer, offline_browser: Any
) -> None:
    import json

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    spec = httpx.get(f"{api.url}/openapi.json", timeout=10).json()
    expected = {f"{m.upper()} {p}" for p, item in spec["paths"].items() for m in item}
    response = httpx.get(f"{api.url}/docs", timeout=10)
    assert response.status_code == 200
    assert "default-src 'none'" in response.headers["content-security-policy"]

    offline_browser.get_log("performance")  # drained: only this page's requests count below
    offline_browser.get(f"{api.url}/docs")
    WebDriverWait(offline_browser, 30).until(
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-rendered") == "yes"
    )
    shown = {
        e.get_attribute("data-operation")
        for e in offline_browser.find_elements(By.CSS_SELECTOR, "details[data-operation]")
    }
    assert shown == expected
    assert "POST /v1/debates" in shown
    # Every request the page made went to the gateway.
    urls = []
    for entry in offline_browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    assert f"{api.url}/openapi.json" in urls
    # Only requests that can leave the machine count: Chromium's own pages (chrome://, e.g. the start
    # tab's resources, logged late on a busy machine) are served from inside the browser.
    leaving = [u for u in urls if urlsplit(u).scheme in NETWORK_SCHEMES]
    assert leaving and all(u.startswith(api.url) for u in leaving), leaving
    errors = [
        e
        for e in offline_browser.get_log("browser")
        if e["level"] == "SEVERE" and not e["message"].startswith("chrome://")
    ]
    assert errors == [], errors
