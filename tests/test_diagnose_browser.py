"""The diagnose report in a real browser: Debian's `chromium` driven headless through
playwright (its Python package only: `executable_path` is the system's browser, nothing is
downloaded). The page loads from a file with no console error and every figure is drawn.
Skipped, with the reason, when chromium or playwright is missing (`make test` installs
chromium when it runs as root)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _trace_raw import NSYS2
from conftest import have, shared

import traceanalyze as ta

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def browser_or_skip() -> str:
    if not Path(CHROMIUM).exists():
        pytest.skip("no chromium (apt-get install chromium; `make test` does it as root)")
    if not have("playwright"):
        pytest.skip("no playwright Python package (pip install 'traceanalyze[dev]')")
    return CHROMIUM


def test_report_loads_without_console_errors_and_draws_every_figure(tmp_path: Path) -> None:
    exe = browser_or_skip()
    from playwright.sync_api import sync_playwright

    page_path = tmp_path / "report.html"
    d = ta.open(shared(NSYS2)).diagnose()
    d.to_html(page_path)
    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1000, "height": 800})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(page_path.as_uri())
        page.wait_for_load_state("load")
        sizes = page.eval_on_selector_all(
            "svg",
            "els => els.map(e => { const r = e.getBoundingClientRect();"
            " return [r.width, r.height, e.querySelectorAll('rect').length]; })",
        )
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        browser.close()
    assert not errors, errors
    assert [u for u in requests if not u.startswith("file:")] == []  # nothing from the network
    assert len(sizes) >= 2
    for w, h, rects in sizes:
        assert w > 100 and h > 10 and rects >= 1
    assert (tmp_path / "report.png").stat().st_size > 10_000
