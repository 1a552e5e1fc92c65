"""Debian's Chromium for the inbox's browser tests, driven by Playwright (nothing downloads one),
and what they check on every page: labels, contrast, the skip link; their screenshots.

With `DT_UPDATE_SCREENSHOTS=1` the screenshots are written to docs/images/inbox-*.png
(commit them), otherwise to a temporary directory, so `make test` leaves the checkout clean.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]

IMAGES = (
    Path(__file__).resolve().parents[2] / "docs" / "images"
    if os.environ.get("DT_UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "durable-tools-inbox-screenshots"
)

needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="Debian's chromium is missing (`make test` installs it)"
)
"""Skip a browser test where Debian's `chromium` is not installed."""


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """A headless Chromium, closed on exit."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            await browser.close()


UNLABELLED = """() => [...document.querySelectorAll('input, select, textarea, button, a[href]')]
  .filter((el) => el.type !== 'hidden' && !el.hidden && el.offsetParent !== null)
  .filter((el) => !((el.labels && el.labels.length) || el.getAttribute('aria-label')
                    || (['BUTTON', 'A'].includes(el.tagName) && el.textContent.trim())))
  .map((el) => el.outerHTML)"""


LOW_CONTRAST = """() => {
  const parse = (c) => {
    const m = c.match(/rgba?\\(([^)]+)\\)/);
    if (!m) return null;
    const p = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
    return { r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1 };
  };
  const lum = ({ r, g, b }) => {
    const f = (v) => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
    };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const background = (el) => {
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c.a > 0) return c;
    }
    return { r: 255, g: 255, b: 255, a: 1 };
  };
  const low = [];
  for (const el of document.querySelectorAll("body *")) {
    if (el.offsetParent === null) continue;
    const text = [...el.childNodes].filter((n) => n.nodeType === 3)
      .map((n) => n.textContent).join("").trim();
    if (!text) continue;
    const style = getComputedStyle(el);
    const a = lum(parse(style.color)), b = lum(background(el));
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    const size = parseFloat(style.fontSize), bold = Number(style.fontWeight) >= 700;
    const large = size >= 24 || (size >= 18.66 && bold);
    if (ratio < (large ? 3 : 4.5)) {
      low.push(el.tagName + " " + ratio.toFixed(2) + " " + text.slice(0, 40));
    }
  }
  return low;
}"""
"""Visible text whose contrast with its background is under WCAG AA (4.5:1; 3:1 when large)."""


async def accessible(page: Page) -> None:
    """Every visible control has a label (or text), visible text meets WCAG AA contrast, the
    skip link comes first and shows on focus."""
    assert await page.evaluate(UNLABELLED) == []
    assert await page.evaluate(LOW_CONTRAST) == []
    first = "document.querySelector('a[href], button, input, select, textarea').textContent"
    assert await page.evaluate(first) == "Skip to content"
    skip = page.get_by_role("link", name="Skip to content")
    await skip.focus()
    box = await skip.bounding_box()
    assert box is not None and box["x"] >= 0


async def shot(page: Page, name: str) -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(IMAGES / f"inbox-{name}.png"), full_page=True)
