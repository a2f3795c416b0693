"""report.html opened alone in a real headless browser: moved out of its folder, every figure still
shows (embedded as a data URI), and the page renders to a screenshot.

Needs Chromium (`apt-get install chromium`; CI installs it). Without it the test fails, so that a
missing browser is never mistaken for a pass; set SAFETYREPRO_SKIP_BROWSER=1 to skip it knowingly.
"""

import json
import os
import re
import shutil
import subprocess

import pytest
from analysis_grids import grid_frame, write

from safetyrepro.cli import main

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--run-all-compositor-stages-before-draw",
    "--virtual-time-budget=5000",
)
# appended to the copy under test: once the page has loaded, write each image's natural width into the DOM
WIDTH_PROBE = (
    "<script>window.addEventListener('load', () => {document.body.setAttribute('data-image-widths', "
    "JSON.stringify([...document.images].map(i => i.complete ? i.naturalWidth : 0)));"
    # every table's right edge within the window: no column cut off at 1280 px
    "document.body.setAttribute('data-tables-cut', JSON.stringify([...document.querySelectorAll('table')]"
    ".map(t => t.getBoundingClientRect().right).filter(r => r > window.innerWidth)));"
    "document.body.setAttribute('data-n-tables', document.querySelectorAll('table').length);"
    # the first screen (800 px): the verdict heading, its first sentences and a figure
    "const v = [...document.querySelectorAll('h2')].find(h => h.textContent === 'Verdict');"
    "const li = document.querySelector('.side li'), img = document.querySelector('.side img');"
    "document.body.setAttribute('data-first-screen', JSON.stringify([v ? v.getBoundingClientRect().top : -1,"
    " li ? li.getBoundingClientRect().top : -1, img ? img.getBoundingClientRect().top : -1,"
    " img ? img.getBoundingClientRect().bottom : -1]));"
    # no header overflows its cell: a word that cannot break would (headers break only after _)
    "document.body.setAttribute('data-headers-overflowing', JSON.stringify([...document.querySelectorAll('th')]"
    ".filter(h => h.scrollWidth > h.clientWidth + 1).map(h => h.textContent)));"
    "});</script>"
)


def _browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("SAFETYREPRO_SKIP_BROWSER") == "1":
        pytest.skip("SAFETYREPRO_SKIP_BROWSER=1: report.html not checked in a browser")
    pytest.fail(
        "no Chromium found (tried " + ", ".join(BROWSERS) + "): install it (`apt-get install chromium`) "
        "or set SAFETYREPRO_SKIP_BROWSER=1 to skip this check knowingly"
    )


def _chromium(browser: str, profile, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow  # about 10 s: a full analysis with figures and two browser starts
def test_report_html_moved_alone_shows_every_figure_in_chromium(rules, tmp_path):
    browser = _browser()
    configs = [c.config_id for c in rules.configs("crows_pairs")] + [c.config_id for c in rules.configs("bbq")][:12]
    # three models whose order changes from configuration to configuration: every figure has something to show
    frame = grid_frame(
        {
            m: {c: round(0.3 + 0.4 * ((7 * i + 3 * j) % 11) / 10, 3) for i, c in enumerate(configs)}
            for j, m in enumerate(("a", "b", "c"))
        }
    )
    grid = write(frame, tmp_path / "run" / "grid.csv")
    assert main(["analyze", str(grid), "--out", str(tmp_path / "run" / "analysis"), "--bootstrap", "20"]) == 0
    html = (tmp_path / "run" / "analysis" / "report.html").read_text()
    sources = re.findall(r'<img src="([^"]*)"', html)
    assert len(sources) >= 4 and all(s.startswith("data:image/png;base64,") for s in sources)

    alone = tmp_path / "moved"
    alone.mkdir()
    page = alone / "report.html"
    page.write_text(html.replace("</body>", WIDTH_PROBE + "</body>"))
    shot = tmp_path / "shot.png"
    rendered = _chromium(
        browser, tmp_path / "profile1", f"--screenshot={shot}", "--window-size=1200,3000", page.as_uri()
    )
    assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", rendered.stderr[-2000:]
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
    dom = _chromium(browser, tmp_path / "profile2", "--window-size=1280,3000", "--dump-dom", page.as_uri())
    found = re.search(r'data-image-widths="([^"]*)"', dom.stdout)
    assert found, dom.stderr[-2000:]
    widths = json.loads(found.group(1).replace("&quot;", '"'))
    assert len(widths) == len(sources) and all(w > 0 for w in widths), widths
    cut = re.search(r'data-tables-cut="([^"]*)"', dom.stdout)
    n_tables = int(re.search(r'data-n-tables="(\d+)"', dom.stdout).group(1))
    assert n_tables >= 8 and json.loads(cut.group(1).replace("&quot;", '"')) == [], cut.group(1)  # at 1280 px
    first = json.loads(re.search(r'data-first-screen="([^"]*)"', dom.stdout).group(1).replace("&quot;", '"'))
    assert all(0 <= y < 800 for y in first[:3]), first  # verdict heading, a sentence and the figure start on screen
    over = json.loads(re.search(r'data-headers-overflowing="([^"]*)"', dom.stdout).group(1).replace("&quot;", '"'))
    assert over == [], over
    assert "_<wbr>" in html and "n_empty 8.000" not in html
