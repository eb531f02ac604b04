#!/usr/bin/env python
"""Render an `embedscope report` page in headless Chromium: full-page PNG screenshots and a check
that loading it makes no network request.

    .venv/bin/python scripts/screenshot_report.py study.html -o shots/ [--width 1400 --width 800]

For each width: ``<name>_w<width>.png`` (the whole page, blank bottom trimmed) and
``<name>_w<width>_<k>.png`` tiles of at most ``--tile`` pixels high (for looking at them one by one).
Chromium's network log of the load is read: any request of the page to other than file: / data:
URLs is listed and the exit status is 1 (checked on a page with an https image and an http style
sheet: both listed). Needs ``chromium`` (Debian's package) or ``--chromium PATH``, and
Pillow (a matplotlib dependency). ``--pdf`` also prints the page to ``<name>.pdf`` (the print style
sheet) and, where poppler's ``pdftoppm`` is installed, each page to ``<name>_pdf-<n>.png``.
Not part of `make test`: a manual check (docs/studies.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def shoot(chromium: str, page: Path, png: Path, width: int, height: int, netlog: Path) -> None:
    with tempfile.TemporaryDirectory() as prof:
        cmd = [chromium, *FLAGS, f"--user-data-dir={prof}", f"--window-size={width},{height}",
               f"--log-net-log={netlog}", "--net-log-capture-mode=Default",
               f"--screenshot={png}", page.resolve().as_uri()]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if res.returncode != 0 or not png.exists():
        sys.exit(f"chromium failed ({res.returncode}): {res.stderr.strip()[-400:]}")


MARGIN = 1000  # blank pixels below the page that prove the window was tall enough (the page has no such gap)


def trim(png: Path) -> tuple[int, bool]:
    """Cut the blank (white) rows at the bottom; return the new height and whether the page may go on
    below the window (less than MARGIN blank rows at the bottom: a taller window is needed)."""
    from PIL import Image, ImageChops

    im = Image.open(png).convert("RGB")
    bbox = ImageChops.difference(im, Image.new("RGB", im.size, (255, 255, 255))).getbbox()
    bottom = bbox[3] if bbox else 1
    reached = bottom >= im.height - MARGIN
    im.crop((0, 0, im.width, min(im.height, bottom + 24))).save(png)
    return min(im.height, bottom + 24), reached


def tiles(png: Path, tile: int) -> list[Path]:
    from PIL import Image

    im = Image.open(png)
    out = []
    for k, top in enumerate(range(0, im.height, tile)):
        p = png.with_name(f"{png.stem}_{k}.png")
        im.crop((0, top, im.width, min(im.height, top + tile))).save(p)
        out.append(p)
    return out


def external_requests(netlog: Path) -> list[str]:
    """URLs other than file: and data: that the page asked for: the net log's URL_REQUEST_START_JOB
    events whose network isolation key is the file:// page (Chromium's own start-up calls to Google,
    which happen whatever the page, have another key and are not the page's)."""
    text = netlog.read_text(encoding="utf-8", errors="replace")
    try:
        log = json.loads(text)
    except json.JSONDecodeError:  # a log cut short on exit: close it
        log = json.loads(text.rstrip().rstrip(",") + "]}")
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = set()
    for ev in log.get("events", []):
        p = ev.get("params") or {}
        u = p.get("url")
        if (ev.get("type") == start and isinstance(u, str) and not u.startswith(("file:", "data:"))
                and str(p.get("network_isolation_key", "")).startswith("file://")):
            urls.add(u)
    return sorted(urls)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page", type=Path, help="the report's HTML file")
    ap.add_argument("-o", "--out", type=Path, required=True, help="folder for the PNGs")
    ap.add_argument("--width", type=int, action="append", help="window width in CSS px (repeatable; default 1400)")
    ap.add_argument("--height", type=int, default=8000, help="first window height tried (doubled until the page fits)")
    ap.add_argument("--tile", type=int, default=1500, help="height of the tiles")
    ap.add_argument("--pdf", action="store_true", help="also print to PDF (and its pages to PNG with pdftoppm)")
    ap.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    a = ap.parse_args()
    if not a.chromium:
        sys.exit("no chromium found: install Debian's 'chromium' package or pass --chromium PATH")
    if not a.page.is_file():
        sys.exit(f"{a.page}: no such file")
    a.out.mkdir(parents=True, exist_ok=True)
    bad: list[str] = []
    for w in a.width or [1400]:
        png = a.out / f"{a.page.stem}_w{w}.png"
        h = a.height
        with tempfile.TemporaryDirectory() as tmp:
            netlog = Path(tmp) / "net.json"
            while True:
                shoot(a.chromium, a.page, png, w, h, netlog)
                height, cut = trim(png)
                if not cut or h >= 64000:
                    break
                h *= 2
            bad += external_requests(netlog)
        parts = tiles(png, a.tile)
        print(f"{png} ({w} x {height} px{', CUT OFF' if cut else ''}); tiles: {parts[0].name} .. {parts[-1].name}")
    if a.pdf:
        pdf = a.out / f"{a.page.stem}.pdf"
        with tempfile.TemporaryDirectory() as prof:
            subprocess.run([a.chromium, *FLAGS, f"--user-data-dir={prof}", f"--print-to-pdf={pdf}",
                            "--no-pdf-header-footer", a.page.resolve().as_uri()], capture_output=True, timeout=120)
        if not pdf.exists():
            sys.exit("chromium did not print the page to PDF")
        print(pdf)
        if shutil.which("pdftoppm"):
            subprocess.run(["pdftoppm", "-r", "80", "-png", str(pdf), str(a.out / f"{a.page.stem}_pdf")], check=True)
            print(f"pages: {a.out / a.page.stem}_pdf-*.png")
    if bad:
        print("external requests:\n  " + "\n  ".join(sorted(set(bad))))
        return 1
    print("no request other than file: and data: URLs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
