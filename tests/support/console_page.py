"""Reading the status console as a person and as a program: its tables by their headers
(html.parser), and the page as headless Chromium renders it (text and a screenshot)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1280,1600"]


class _Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def fetch(http_port: int, headers: dict[str, str] | None = None) -> str:
    request = urllib.request.Request(f"http://127.0.0.1:{http_port}/", headers=headers or {})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers["Content-Type"].startswith("text/html")
        return response.read().decode()


def table(page: str, first_header: str) -> list[dict[str, str]]:
    """The rows of the table whose first column is ``first_header``, as header → text."""
    parser = _Tables()
    parser.feed(page)
    for rows in parser.tables:
        if rows and rows[0] and rows[0][0] == first_header:
            return [dict(zip(rows[0], row, strict=True)) for row in rows[1:]]
    raise AssertionError(f"no table starting with {first_header!r}")


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def render_in_chromium(url: str, screenshot: Path) -> str:
    """The page's DOM after Chromium rendered it, and a screenshot of it."""
    browser = chromium()
    assert browser is not None, "chromium is not installed (scripts/test.sh installs Debian's)"
    with tempfile.TemporaryDirectory() as profile:
        shot = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={screenshot}",
                               url], capture_output=True, text=True, timeout=120)
        assert shot.returncode == 0 and screenshot.exists(), shot.stderr[-2000:]
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
                             capture_output=True, text=True, timeout=120)
        assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout
