"""/api/docs/ in headless Chromium: Swagger UI renders the schema from the project's static
files, with no request to any host that is not loopback and no console error."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_swagger_ui_renders_offline_from_static_files(
    page, live_server, browser_login, staff_user, console_errors, outside_requests
):
    browser_login(page, live_server.url, staff_user)
    loaded: list[str] = []
    page.on("requestfinished", lambda request: loaded.append(request.url))

    page.goto(f"{live_server.url}/api/docs/")
    page.wait_for_selector(".swagger-ui .opblock", timeout=20_000)

    # The chargeback operation is listed, read from the schema this server serves.
    assert page.locator(".opblock-summary-path", has_text="/api/v1/chargeback/").count() >= 1
    assert any("/static/drf_spectacular_sidecar/swagger-ui-dist/" in url for url in loaded)
    assert any(url.startswith(f"{live_server.url}/api/schema/") for url in loaded)
    assert outside_requests == []
    assert console_errors == []


def test_redoc_renders_offline_from_this_site(
    page, live_server, browser_login, staff_user, console_errors, outside_requests, tmp_path
):
    browser_login(page, live_server.url, staff_user)
    loaded: list[str] = []
    page.on("request", lambda request: loaded.append(request.url))

    page.goto(f"{live_server.url}/api/redoc/")
    page.wait_for_selector("text=/api/v1/chargeback/", timeout=30_000)
    # ReDoc's footer, whose logo the bundle from the package would fetch from Redocly's CDN.
    footer = page.locator("a", has_text="API docs by Redocly")
    footer.wait_for(state="attached")
    page.screenshot(path=str(tmp_path / "redoc.png"), full_page=False)

    assert page.title() == "GPU Ledger API · ReDoc"
    assert footer.locator("img").get_attribute("src").startswith("data:image/svg+xml,")
    assert f"{live_server.url}/api/redoc/redoc.standalone.js" in loaded
    assert any(url.startswith(f"{live_server.url}/api/schema/") for url in loaded)
    assert all(url.startswith((live_server.url, "data:", "blob:")) for url in loaded), loaded
    assert outside_requests == []
    assert console_errors == []
