"""What every generated page must satisfy: well-formed markup, no external URL (a link to a local file is
not one: nothing is loaded), parseable data."""

from __future__ import annotations

import html as html_lib
import json
import re
from html.parser import HTMLParser
from typing import Any

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _Balance(HTMLParser):
    """Every non-void element is closed, in order (SVG's self-closing elements included)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, tuple[int, int]]] = []
        self.errors: list[str] = []
        self.urls: list[str] = []
        self.file_links: list[str] = []
        """``<a href="file:///...">``: a local file the reader may open (a tune study); clicked, never loaded."""
        self.tags: dict[str, int] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for name, value in attrs:
            if tag == "a" and name == "href" and value is not None and value.startswith("file:///"):
                self.file_links.append(value)
            elif name in ("src", "href", "action", "xlink:href", "poster", "data") and value is not None:
                self.urls.append(value)
        if tag not in VOID:
            self.stack.append((tag, self.getpos()))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for name, value in attrs:
            if name in ("src", "href", "xlink:href") and value is not None:
                self.urls.append(value)

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if not self.stack:
            self.errors.append(f"</{tag}> at {self.getpos()} closes nothing")
            return
        open_tag, where = self.stack.pop()
        if open_tag != tag:
            self.errors.append(f"</{tag}> at {self.getpos()} closes <{open_tag}> opened at {where}")


def check_page(html: str) -> dict[str, Any]:
    """Assert the page is well formed, loads nothing external, and return its embedded data."""
    parser = _Balance()
    parser.feed(html)
    parser.close()
    assert not parser.errors, parser.errors[:5]
    assert not parser.stack, f"unclosed: {parser.stack[:5]}"
    assert html.startswith("<!DOCTYPE html>")
    external = [u for u in parser.urls if not u.startswith("#")]
    assert not external, f"links that leave the page: {external[:5]}"
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", html, re.I)
    assert not re.search(r"url\(\s*['\"]?(?:https?:)?//", html, re.I)
    assert not re.search(r"@import|<link\b|<iframe\b|<img\b", html, re.I)
    scripts = re.findall(r"<script\b[^>]*>", html)
    assert all("src=" not in s for s in scripts)
    match = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
    assert match, "no embedded data block"
    return json.loads(match.group(1))


def section_ids(html: str) -> list[str]:
    """``id`` of every ``<section>`` in page order."""
    return re.findall(r'<section id="([^"]+)"', html)


def table_rows(html: str, caption: str) -> list[list[str]]:
    """Cell texts of the table with this caption (tags stripped)."""
    match = re.search(r"<caption>" + re.escape(html_lib.escape(caption)) + r"</caption>(.*?)</table>", html, re.S)
    assert match, f"no table captioned {caption!r}"
    body = match.group(1).split("<tbody>", 1)[1]
    return [[html_lib.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)]
