"""The HTML report in a real browser: headless Chromium renders it, takes screenshots, dumps the DOM.

The pages (index.html, index.zh.html, article.html, article.zh.html) are built
from synthetic evidence (a proof, passing and failing checks with hostile
text, a measurement with an SVG figure) for all 28 claims. Chromium is the
Debian package ``chromium`` and the CJK font ``fonts-noto-cjk`` (``.ci/run``
installs both); without Chromium the tests are skipped and say why.

Beyond screenshots, a small DevTools-protocol client (:class:`Browser`, over
``--remote-debugging-pipe``: JSON messages on file descriptors 3 and 4, no
network port, no extra library) asks the browser what it laid out: MathML
elements and their boxes, the page's scroll width at 1280 px and 400 px, the
platform font that rendered the Chinese text, the anchors the article's
highlights link to, a tooltip's display when its sentence has the focus.
Screenshots go to the test's tmp dir; with ``ATTNCLAIMS_SCREENSHOTS=DIR`` they
are also copied there (that is how docs/img/ was made). These tests are about
the harness, not evidence for any claim, so they carry no claim marker.
"""
from __future__ import annotations

import base64
import json
import os
import re
import select
import shutil
import subprocess
import time
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
    write_report(report, out, ["html"], langs=["en", "zh"])
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


# ---------------------------------------------------------------------------------------------
# What the browser laid out, asked over the DevTools protocol
# ---------------------------------------------------------------------------------------------

#: fonts that cover Chinese (the Noto CJK family that .ci/run installs, and the usual others)
CJK_FONTS = ("Noto Sans CJK", "Noto Serif CJK", "Source Han", "WenQuanYi", "Droid Sans Fallback", "AR PL",
             "PingFang", "Hiragino", "Microsoft YaHei", "SimSun", "Heiti")


class Browser:
    """Headless Chromium driven over ``--remote-debugging-pipe`` (fd 3: commands in, fd 4: replies out,
    each message JSON terminated by a NUL byte)."""

    def __init__(self, profile: Path):
        to_child_r, self._w = os.pipe()
        self._r, from_child_w = os.pipe()

        def wire():  # in the child: its fd 3 reads our commands, its fd 4 writes its replies
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        profile.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe",
                                      "about:blank"], pass_fds=(3, 4), preexec_fn=wire,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf, self._id = b"", 0

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 60):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply.get("result", {})
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"chromium did not answer {method} within {timeout} s")
            if select.select([self._r], [], [], left)[0]:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"chromium closed the pipe during {method}")
                self._buf += chunk

    def page(self, url: str, width: int, height: int = 1000) -> "Page":
        """A new tab on ``url`` (the previous one is closed: one tab at a time keeps the browser light)."""
        if getattr(self, "_open", None) is not None:
            self.send("Target.closeTarget", {"targetId": self._open.target})
        self._open = Page(self, url, width, height)
        return self._open

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            self.proc.kill()
        self.proc.wait(timeout=30)
        os.close(self._w)
        os.close(self._r)


class Page:
    def __init__(self, browser: Browser, url: str, width: int, height: int):
        self.b = browser
        self.target = target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.cmd("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                        "mobile": False})
        self.cmd("Emulation.setFocusEmulationEnabled", {"enabled": True})
        for domain in ("Page", "DOM", "CSS"):
            self.cmd(f"{domain}.enable")
        self.cmd("Page.navigate", {"url": url})
        for _ in range(400):
            if self.js("document.readyState") == "complete":
                break
            time.sleep(0.05)

    def cmd(self, method: str, params: dict | None = None):
        return self.b.send(method, params, self.session)

    def js(self, expression: str):
        r = self.cmd("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression[:80]}: {r['exceptionDetails'].get('text')}")
        return r["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        path.write_bytes(base64.b64decode(self.cmd("Page.captureScreenshot", {"format": "png"})["data"]))
        keep = os.environ.get("ATTNCLAIMS_SCREENSHOTS")
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, Path(keep) / path.name)
        return path

    def fonts(self, selector: str) -> list[dict]:
        """The platform fonts that rendered the text of the first element matching ``selector``."""
        root = self.cmd("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
        node = self.cmd("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
        assert node, f"no element {selector!r}"
        return self.cmd("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    b = Browser(tmp_path_factory.mktemp("chromium") / "profile")
    yield b
    b.close()


def _overflow(page: Page) -> list[str]:
    """Elements that stick out of the viewport sideways without a scrolling box around them."""
    return page.js("""(() => { const out = [];
      for (const el of document.querySelectorAll('body *')) {
        const r = el.getBoundingClientRect();
        if (r.width === 0 || r.right <= innerWidth + 1) continue;
        let a = el.parentElement, boxed = false;
        while (a) { if (getComputedStyle(a).overflowX !== 'visible') { boxed = true; break; } a = a.parentElement; }
        if (!boxed) out.push(el.tagName + '.' + el.className + ': ' + el.textContent.slice(0, 60));
      } return out.slice(0, 5); })()""")


@pytest.mark.parametrize("name", ["index.html", "index.zh.html", "article.html", "article.zh.html"])
@pytest.mark.parametrize("width", [1280, 400])
def test_no_horizontal_overflow(browser, page, tmp_path, name, width):
    p = browser.page((page.parent / name).as_uri(), width)
    assert p.js("document.documentElement.scrollWidth") <= width, _overflow(p)
    p.screenshot(tmp_path / f"{name.replace('.', '-')}-{width}.png")


def test_mathml_is_present_and_laid_out(browser, page, tmp_path):
    p = browser.page(page.as_uri() + "#claim-softmax-saturation", 1280)
    info = p.js("""(() => { const blocks = [...document.querySelectorAll('.mathblock > math')];
      const frac = document.querySelector('#claim-softmax-distribution .mathblock mfrac');
      const fr = frac.getBoundingClientRect(), line = parseFloat(getComputedStyle(document.body).lineHeight);
      return {n: document.querySelectorAll('math').length, blocks: blocks.length,
              display: getComputedStyle(blocks[0]).display, style: getComputedStyle(blocks[0]).mathStyle,
              fracHeight: fr.height, fracWidth: fr.width, line,
              inline: getComputedStyle(document.querySelector('dd math')).display}; })()""")
    assert info["n"] > 300 and info["blocks"] > 200
    # laid out by the MathML engine (display math; steps left-aligned in display style), not shown as text
    assert info["display"] in ("math", "inline math") and info["style"] == "normal"
    assert info["inline"] in ("math", "inline math")
    assert info["fracWidth"] > 10 and info["fracHeight"] > info["line"]  # a fraction stands on two floors
    p.js("document.getElementById('claim-softmax-saturation').scrollIntoView()")
    p.screenshot(tmp_path / "claim-section.png")


def test_chinese_text_is_rendered_with_a_cjk_font(browser, page, tmp_path):
    for name, selector in (("index.zh.html", "#claim-softmax-saturation h3"), ("index.html", "blockquote"),
                           ("article.html", "#article-text")):
        p = browser.page((page.parent / name).as_uri(), 1280)
        used = [f["familyName"] for f in p.fonts(selector) if f.get("glyphCount", 0) > 0]
        assert any(any(k in f for k in CJK_FONTS) for f in used), (name, used)
    p = browser.page((page.parent / "index.zh.html").as_uri() + "#claim-scaling-variance", 1280)
    p.js("document.getElementById('claim-scaling-variance').scrollIntoView()")
    p.screenshot(tmp_path / "zh-edition.png")


def test_the_article_highlights_link_to_existing_anchors_and_show_their_tooltip(browser, page, tmp_path):
    art = browser.page((page.parent / "article.html").as_uri(), 1280)
    links = art.js("[...document.querySelectorAll('.hl a.cl, #beyond a.cl')].map(a => a.getAttribute('href'))")
    ids = set(art.js("[...document.querySelectorAll('[id^=q-]')].map(e => e.id)"))
    assert len(links) == len(set(links)) == 28 and all(h.startswith("index.html#claim-") for h in links)
    # the claims beyond the article are listed after it, none highlighted on a sentence of it
    beyond = art.js("[...document.querySelectorAll('#beyond a.cl')].map(a => a.getAttribute('href'))")
    assert {h.split("-", 1)[1] for h in beyond} == {"attention-lipschitz", "paper-tables"}
    assert art.js("document.querySelectorAll('#article-text .hl a.cl').length") == 28 - len(beyond)
    index = browser.page(page.as_uri(), 1280)
    missing = index.js(f"{json.dumps([h.split('#')[1] for h in links])}.filter(i => !document.getElementById(i))")
    assert missing == []
    back = index.js("[...document.querySelectorAll('blockquote a.to-article')].map(a => a.getAttribute('href'))")
    art = browser.page((page.parent / "article.html").as_uri(), 1280)
    assert len(back) == 28 and all(h.split("#")[1] in ids for h in back)  # and back from the report
    shown = "getComputedStyle(document.querySelector('#q-softmax-distribution > .tip')).display"
    assert art.js(shown) == "none"
    art.js("document.getElementById('q-softmax-distribution').focus()")
    assert art.js(shown) == "block"  # focus (keyboard) shows the precise statement, CSS only
    # a passage no claim checks: marked, and its reason shown on focus
    reason = "getComputedStyle(document.querySelector('#article-text .nc > .tip')).display"
    assert art.js(reason) == "none"
    art.js("document.querySelector('#article-text .nc').focus()")
    assert art.js(reason) == "block"
    assert art.js("document.scripts.length") == 0
    art.screenshot(tmp_path / "article.png")


def test_hostile_text_stays_text_in_every_page(browser, page):
    for name in ("index.html", "index.zh.html", "article.html", "article.zh.html"):
        p = browser.page((page.parent / name).as_uri(), 1280)
        assert p.js("document.scripts.length") == 0, name
        assert p.js("document.querySelectorAll('[onload],[onclick],[onerror]').length") == 0, name
    p = browser.page(page.as_uri(), 1280)
    assert "outside the hull <script>alert(1)</script>" in p.js("document.body.textContent")
