"""The HTML report in a real browser: headless Chromium renders it, takes a screenshot, dumps the DOM.

The page is built from synthetic evidence (a proof, passing and failing
checks with hostile text, a measurement with an SVG figure) for all 28
claims. Chromium is the Debian package ``chromium`` (``.ci/run`` installs it);
without it the test is skipped and says why. These tests are about the
harness, not evidence for any claim, so they carry no claim marker.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from attnclaims.evidence import Evidence
from attnclaims.registry import load_registry
from attnclaims.report import build_report, write_report

CHROMIUM = next((p for p in ("/usr/bin/chromium", shutil.which("chromium") or "") if p and Path(p).is_file()), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (/usr/bin/chromium missing; "
                                                         "`apt-get install chromium`, as .ci/run does)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=180)


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = tmp_path_factory.mktemp("html")
    (out / "figures").mkdir()
    fig, ax = plt.subplots(figsize=(4, 2.5))
    ax.plot([1, 4, 16, 64], [0.5, 0.25, 0.12, 0.06], marker="o", label="unscaled")
    ax.legend()
    fig.savefig(out / "figures" / "curve.svg")
    plt.close(fig)
    evidence = [
        Evidence("softmax-distribution", "property", "tests/test_s31.py::test_rows", "passed",
                 implementation="reference", examples=50),
        Evidence("convex-combination", "property", "tests/test_s31.py::test_hull", "failed",
                 implementation="reference", message="outside the hull <script>alert(1)</script>",
                 counterexample="x=array([[1.0, 2.0]])", repro="print(impl.attention(q, k, v))",
                 measured=1e-3, bound=1e-15),
        Evidence("softmax-saturation", "measurement", "tests/test_m.py::test_curve", "passed",
                 data={"decision": "polynomial", "table": [{"d_k": 1, "norm": 0.5}]},
                 figures=[str(out / "figures" / "curve.svg")]),
    ]
    env = {"python": "3", "platform": "linux", "suite_version": "0", "profile": "ci", "seed": None}
    report = build_report(load_registry(), evidence, [{"name": "reference", "spec": "reference"}], env, out_dir=out)
    write_report(report, out, ["html"])
    return out / "index.html"


def test_the_page_renders_and_is_not_blank(page, tmp_path):
    import matplotlib.image as mpimg

    png = tmp_path / "screenshot.png"
    proc = _chromium(tmp_path, f"--screenshot={png}", "--window-size=1200,2000", page.as_uri())
    assert png.is_file(), f"no screenshot; chromium said: {proc.stderr[-2000:]}"
    pixels = mpimg.imread(str(png))
    assert pixels.shape[0] >= 1000 and pixels.shape[1] >= 1000
    gray = pixels[..., :3].mean(axis=2)
    assert gray.std() > 0.05, "the screenshot is (nearly) one colour: the page did not render"
    # the dark header band at the top and the light page below it
    assert gray[:40].mean() < 0.3 and gray[400:].mean() > 0.7


def test_a_phone_width_screenshot_renders(page, tmp_path):
    import matplotlib.image as mpimg

    png = tmp_path / "phone.png"
    _chromium(tmp_path, f"--screenshot={png}", "--window-size=390,1600", page.as_uri())
    pixels = mpimg.imread(str(png))
    assert pixels[..., :3].mean(axis=2).std() > 0.05


def test_the_dom_has_the_summary_table_and_one_section_per_claim(page, tmp_path):
    proc = _chromium(tmp_path, "--dump-dom", page.as_uri())
    dom = proc.stdout
    assert 'id="summary-table"' in dom, proc.stderr[-2000:]
    registry = load_registry()
    rows = re.findall(r'<td class="id"><a href="#claim-([a-z0-9-]+)"', dom)
    assert rows == registry.order()
    sections = re.findall(r'<section class="claim[^"]*" id="claim-([a-z0-9-]+)"', dom)
    assert sections == registry.order()
    # hostile text stayed text: the parser built no script element from it
    assert "<script" not in dom.lower() and "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert dom.count("<svg") >= 1
