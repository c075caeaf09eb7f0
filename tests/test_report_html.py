"""The HTML reports of `verify --html` and `compare --html`, opened in headless Chromium.

Chromium comes from the distribution (`apt-get install -y chromium`; .ci/run installs it);
without it the browser test is skipped, saying so.
"""

import json
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from fsdp2_port.prove.verify import Report, html_report

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Charts(HTMLParser):
    """What a rendered page shows: per chart (metric, kind), each series' point count; the
    tolerance lines; the verdict's text."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: dict[tuple[str, str], dict[str, int]] = {}
        self.tolerance_lines = 0
        self.verdict = ""
        self._chart: tuple[str, str] | None = None
        self._in_verdict = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg":
            self._chart = (a["data-metric"], a["data-kind"])
            self.charts[self._chart] = {}
        elif tag == "polyline" and self._chart:
            self.charts[self._chart][a["data-series"]] = len(a["points"].split())
        elif tag == "line" and a.get("class") == "tolerance":
            self.tolerance_lines += 1
        self._in_verdict = a.get("id") == "verdict"

    def handle_endtag(self, tag):
        self._in_verdict = False

    def handle_data(self, data):
        if self._in_verdict:
            self.verdict += data


def _dom(page: Path, profile: Path) -> str:
    """The page's DOM as the browser built it."""
    run = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def _compare_page(tmp_path: Path) -> Path:
    """A compare report of two 4-step logs that part at step 3 (no torch, no ranks)."""
    log = "for i in range(4): print(f'step {i} loss {2 - i / 10 + (i == 3) / 100} norm 0.5')"
    old, new = tmp_path / "old.py", tmp_path / "new.py"
    old.write_text(log.replace("(i == 3) / 100", "0"))
    new.write_text(log)
    page = tmp_path / "compare.html"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "fsdp2_port",
            "compare",
            old,
            new,
            "--launcher",
            "none",
            "--html",
            page,
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(run.stdout)["verdict"] == "different"
    return page


def _verify_page(tmp_path: Path) -> Path:
    report = Report(
        config={"model": "m:f", "dtype": "fp32", "judge_old_clip": False, "world_size": 2},
        tolerance={"loss": 1e-5, "norm": 1e-5, "param": 1e-5},
        losses={a: [2.0, 1.9, 1.8] for a in ("reference", "fsdp1", "fsdp2", "old_clip")},
        norms={
            "reference": [1.0] * 3,
            "fsdp1": [1.0] * 3,
            "fsdp2": [1.0] * 3,
            "old_clip": [0.7] * 3,
        },
        param_diff={"fsdp1": 1e-7, "fsdp2": 1e-7, "old_clip": 3e-2},
    )
    page = tmp_path / "verify.html"
    page.write_text(html_report(report))
    return page


def test_pages_are_self_contained(tmp_path):
    for page in (_compare_page(tmp_path), _verify_page(tmp_path)):
        text = page.read_text()
        assert "<script" not in text and " src=" not in text and " href=" not in text
        assert text.replace('xmlns="http://www.w3.org/2000/svg"', "").count("http") == 0


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed: apt-get install chromium")
@pytest.mark.slow
def test_chromium_shows_curves_tolerances_and_verdicts(tmp_path):
    compare = Charts()
    compare.feed(_dom(_compare_page(tmp_path), tmp_path / "profile"))
    assert compare.verdict == "VERDICT: different: 1 departure from old"
    assert compare.charts == {
        ("loss", "values"): {"old": 4, "new": 4},
        ("loss", "rel_diff"): {"new": 4},
        ("grad_norm", "values"): {"old": 4, "new": 4},
        ("grad_norm", "rel_diff"): {"new": 4},
    }
    assert compare.tolerance_lines == 2

    verify = Charts()
    verify.feed(_dom(_verify_page(tmp_path), tmp_path / "profile"))
    assert verify.verdict.startswith("EQUIVALENT")
    arms = {"reference": 3, "fsdp1": 3, "fsdp2": 3, "old_clip": 3}
    assert verify.charts[("loss", "values")] == verify.charts[("grad norm", "values")] == arms
    assert verify.charts[("grad norm", "rel_diff")] == {"fsdp1": 3, "fsdp2": 3, "old_clip": 3}
    assert verify.tolerance_lines == 2
