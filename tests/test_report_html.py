"""The HTML reports of `verify --html` and `compare --html`, opened in headless Chromium.

Chromium comes from the distribution (`apt-get install -y chromium`; .ci/run installs it);
without it the browser tests are skipped, saying so.
"""

import html
import json
import re
import shutil
import struct
import subprocess
import sys
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from fsdp2_port.prove import compare, report_html
from fsdp2_port.prove.verify import Report, html_report

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Charts(HTMLParser):
    """What a rendered page shows: per chart (metric, kind), each series' points drawn; the
    tolerance lines; the notes of values left out; the verdict's text."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: dict[tuple[str, str], dict[str, int]] = {}
        self.tolerance_lines = 0
        self.verdict = ""
        self.skipped: list[str] = []
        self._chart: tuple[str, str] | None = None
        self._series: str | None = None
        self._text: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg":
            self._chart = (a["data-metric"], a["data-kind"])
            self.charts[self._chart] = {}
        elif tag == "g" and self._chart and "data-series" in a:
            self._series = a["data-series"]
            self.charts[self._chart][self._series] = 0
        elif tag == "circle" and self._chart and self._series:
            self.charts[self._chart][self._series] += 1
        elif tag == "line" and a.get("class") == "tolerance":
            self.tolerance_lines += 1
        if a.get("id") == "verdict":
            self._text = []
        elif a.get("class") == "skipped":
            self._text = self.skipped

    def handle_endtag(self, tag):
        if tag == "g":
            self._series = None
        if self._text is not None and tag in ("p", "text"):
            if self._text is not self.skipped:
                self.verdict = "".join(self._text)
            self._text = None

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)


def _chromium(page: Path, profile: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
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
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            f"--user-data-dir={profile}",
            *options,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )


def _dom(page: Path, profile: Path, *options: str) -> str:
    """The page's DOM as the browser built it."""
    run = _chromium(page, profile, *options, "--dump-dom")
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


def test_a_log_axis_leaves_zeros_out_and_says_so():
    """Step 0's relative difference of 0 (the same start) has no place on a log scale: no
    point, no tick labelled 0; the chart counts what it left out, the figures keep it."""
    page = report_html.render(
        title="t",
        verdict="v",
        outcome="pass",
        steps=[0, 1, 2],
        curves={"loss": {"old": [2.0, 1.9, 1.8], "new": [2.0, 1.9002, 1.8]}},
        rel_diffs={"loss": {"new": [0.0, 1e-4, 0.0]}},
        tolerance={"loss": 2e-3},
        baseline="old",
    )
    charts = Charts()
    charts.feed(page)
    assert charts.charts[("loss", "rel_diff")] == {"new": 1}
    assert charts.skipped == ["2 zeros (equal) not drawn on a log scale"]
    rel_diff_chart = page[page.index('data-kind="rel_diff"') :]
    assert 'text-anchor="end">0</text>' not in rel_diff_chart[: rel_diff_chart.index("</svg>")]
    assert page.count("<td>0.0e+00</td>") == 2


def _run(label: str, seconds: float, rss: int, every: float) -> compare.Run:
    """A finished run of 4 logged steps, ``every`` seconds apart after 3 s of start-up."""
    return compare.Run(
        f"/home/user/project/{label}.py",
        [
            *("python", "-m", "torch.distributed.run", "--standalone", f"{label}.py", "--data"),
            "/datasets/" + "a_very_long_dataset_folder_name_without_spaces" * 3,
        ],
        0,
        seconds,
        peak_rss_bytes=rss,
        step_times={s: 3.0 + every * s for s in range(4)},
    )


def _equal_curves_page(tmp_path: Path) -> Path:
    """A compare report of two runs that log the same values (curves on top of each other),
    NEW faster and smaller, and a command line longer than any page is wide."""
    runs = {"old": _run("old", 9.0, 400 << 20, 0.5), "new": _run("new", 7.0, 300 << 20, 0.25)}
    for run in runs.values():
        run.stdout = "".join(
            f"step {s} loss {2 - s / 10} grad_norm {0.5 + s / 50}\n" for s in range(4)
        )
    page = tmp_path / "equal.html"
    page.write_text(compare.html_report(compare.judge_runs(compare.Config(), runs)))
    return page


def test_the_compare_page_shows_time_and_memory_beside_the_verdict(tmp_path):
    text = _equal_curves_page(tmp_path).read_text()
    table = text[text.index("<table id='payoff'>") :]
    table = table[: table.index("</table>")]
    cells = [re.findall(r"<t[dh][^>]*>([^<]*)</t[dh]>", row) for row in table.split("<tr>")[1:]]
    assert cells == [
        ["", "old", "new", "new/old"],
        ["median step", "500.0 ms", "250.0 ms", "0.50"],
        ["first step, with start-up", "3.00 s", "3.00 s", "1.00"],
        ["total", "9.00 s", "7.00 s", "0.78"],
        ["peak memory (RSS, largest process)", "400.0 MiB", "300.0 MiB", "0.75"],
    ]
    assert html.escape(compare.NOT_JUDGED[1:]) in text
    charts = Charts()
    charts.feed(text)
    assert charts.charts[("time", "time")] == {"old": 3, "new": 3}  # steps 1-3: step 0 starts


def test_pages_are_self_contained_and_name_no_temporary_folder(tmp_path):
    for page in (_compare_page(tmp_path), _verify_page(tmp_path)):
        text = page.read_text()
        assert "<script" not in text and " src=" not in text and " href=" not in text
        assert text.replace('xmlns="http://www.w3.org/2000/svg"', "").count("http") == 0
        assert "fsdp2-port-compare-" not in text


@pytest.mark.slow
def test_a_torchrun_compare_shows_the_users_command_and_measures_each_run(tmp_path):
    """Under torchrun compare keeps torchrun's logs in a folder of its own, and starts each
    rank under its measuring module: neither appears in the command a report shows."""
    log = "for i in range(3): print(f'step {i} loss {2 - i / 10} grad_norm 0.5')"
    old, new = tmp_path / "old.py", tmp_path / "new.py"
    old.write_text(log)
    new.write_text(log)
    page = tmp_path / "compare.html"
    run = subprocess.run(
        [
            *(sys.executable, "-m", "fsdp2_port", "compare", old, new, "--nproc-per-node", "1"),
            *("--html", page, "--format", "json"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    report = json.loads(run.stdout)
    assert report["verdict"] == "same", run.stderr
    for label, r in report["runs"].items():
        assert r["command"] == [
            *(sys.executable, "-m", "torch.distributed.run", "--standalone"),
            *("--nproc-per-node", "1", str(tmp_path / f"{label}.py")),
        ]
        assert r["time"]["steps"] == [1, 2] and r["memory"]["peak_rss_bytes"] > 0
    text = page.read_text()
    assert "--log-dir" not in text and "fsdp2-port-compare-" not in text
    assert compare.MEASURE not in text


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed: apt-get install chromium")
@pytest.mark.slow
def test_chromium_shows_curves_tolerances_and_verdicts(tmp_path):
    compare_page = Charts()
    compare_page.feed(_dom(_compare_page(tmp_path), tmp_path / "profile"))
    assert compare_page.verdict == "VERDICT: different: 1 departure from old"
    assert compare_page.charts == {
        ("loss", "values"): {"old": 4, "new": 4},
        ("loss", "rel_diff"): {"new": 1},  # steps 0-2 are equal: zeros, not drawn
        ("grad_norm", "values"): {"old": 4, "new": 4},
        ("grad_norm", "rel_diff"): {"new": 0},
        ("time", "time"): {"old": 3, "new": 3},
    }
    assert compare_page.tolerance_lines == 2

    verify = Charts()
    verify.feed(_dom(_verify_page(tmp_path), tmp_path / "profile"))
    assert verify.verdict.startswith("EQUIVALENT")
    arms = {"reference": 3, "fsdp1": 3, "fsdp2": 3, "old_clip": 3}
    assert verify.charts[("loss", "values")] == verify.charts[("grad norm", "values")] == arms
    assert verify.charts[("grad norm", "rel_diff")] == {"fsdp1": 0, "fsdp2": 0, "old_clip": 3}
    assert verify.tolerance_lines == 2


# What a page reports of its own layout once the browser has laid it out: run on a copy only
# (the reports themselves carry no script).
PROBE = """<script>
const page = document.documentElement;
const chart = document.querySelector('svg[data-kind="values"]').getBoundingClientRect();
document.body.dataset.probe = JSON.stringify({
  scrollWidth: page.scrollWidth,
  clientWidth: page.clientWidth,
  chart: [chart.left, chart.top, chart.width],
  settingsRight: document.getElementById('settings').getBoundingClientRect().right,
});
</script>"""
WINDOW_WIDTH = 520  # narrower than a chart (560): it must shrink, and the settings wrap


def _layout(page: Path, profile: Path) -> dict:
    probed = page.with_name("probed.html")
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    dom = _dom(probed, profile, f"--window-size={WINDOW_WIDTH},1000")
    return json.loads(html.unescape(re.search(r'data-probe="([^"]*)"', dom).group(1)))


def _png_rows(png: bytes) -> list[list[tuple[int, ...]]]:
    """The pixels of an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes), as
    rows of (r, g, b[, a]) tuples."""
    chunks, at = {}, 8
    while at < len(png):
        length, kind = struct.unpack(">I4s", png[at : at + 8])
        chunks[kind] = chunks.get(kind, b"") + png[at + 8 : at + 8 + length]
        at += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    assert (depth, colour in (2, 6), interlace) == (8, True, 0)
    n = 3 if colour == 2 else 4
    raw, stride, above = zlib.decompress(chunks[b"IDAT"]), width * n, bytearray(width * n)
    rows = []
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for i in range(stride):
            a, b = line[i - n] if i >= n else 0, above[i]
            c = above[i - n] if i >= n else 0
            p = a + b - c
            nearest = min((abs(p - a), 0, a), (abs(p - b), 1, b), (abs(p - c), 2, c))[2]
            line[i] = (line[i] + (0, a, b, (a + b) // 2, nearest)[kind]) & 0xFF
        rows.append([tuple(line[x * n : x * n + 3]) for x in range(width)])
        above = line
    return rows


def _count(rows, box, colour: str) -> int:
    """Pixels within ``box`` (left, top, right, bottom) of ``colour`` (#rrggbb), give or take
    anti-aliasing's few levels."""
    want = bytes.fromhex(colour[1:])
    left, top, right, bottom = (round(v) for v in box)
    return sum(
        all(abs(p - w) <= 12 for p, w in zip(pixel, want))
        for row in rows[top:bottom]
        for pixel in row[left:right]
    )


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed: apt-get install chromium")
@pytest.mark.slow
def test_chromium_shows_old_under_an_equal_new_and_the_page_never_scrolls_sideways(tmp_path):
    page = _equal_curves_page(tmp_path)
    layout = _layout(page, tmp_path / "profile")
    assert layout["scrollWidth"] <= layout["clientWidth"] == WINDOW_WIDTH
    assert layout["settingsRight"] <= layout["clientWidth"]
    left, top, width = layout["chart"]
    scale = width / report_html.WIDTH
    assert scale < 1  # the chart shrank to fit
    plot = (
        left + report_html.LEFT * scale,
        top + report_html.TOP * scale,
        left + (report_html.WIDTH - report_html.RIGHT) * scale,
        top + (report_html.HEIGHT - report_html.BOTTOM) * scale,
    )  # inside the axes: the legend's samples lie above
    shot = tmp_path / "shot.png"
    height = round(plot[3]) + 8
    run = _chromium(
        page, tmp_path / "profile", f"--window-size={WINDOW_WIDTH},{height}", f"--screenshot={shot}"
    )
    assert run.returncode == 0, run.stderr
    rows = _png_rows(shot.read_bytes())
    old, new = (_count(rows, plot, c) for c in report_html.COLOURS[:2])
    # one curve across the plot, ~400 px long: its band shows ~2 px each side of NEW's line
    assert old > 400 and new > 200, (old, new)
