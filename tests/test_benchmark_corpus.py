"""The corpus benchmark's own tools: ``benchmarks/corpus.py`` counts what it should and fails
when it should, ``benchmarks/fetch_corpus.py`` fetches by commit and checks every hash.

The real corpus is third-party code and not shipped; these run on corpora made here.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A model held on FSDP1 by LOCAL_STATE_DICT: its constructor must stay, with a marker.
HELD = """\
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType


def build(net):
    model = FSDP(net, use_orig_params=True)
    with FSDP.state_dict_type(model, StateDictType.LOCAL_STATE_DICT):
        torch.save(model.state_dict(), "local.pt")
    return model
"""


def _corpus(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "corpus.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_corpus_counts_a_repository_that_migrates_whole(tmp_path):
    shutil.copytree(ROOT / "tests" / "migration", tmp_path / "corpus" / "ours+migration")
    before = {p: p.read_bytes() for p in (tmp_path / "corpus").rglob("*.py")}
    done = _corpus(str(tmp_path / "corpus"), "--json", str(tmp_path / "out.json"))
    assert done.returncode == 0, done.stdout + done.stderr
    totals = json.loads((tmp_path / "out.json").read_text())["totals"]
    # One FSDP(...) per script, four scripts.
    assert totals["constructors_before"] == 4 and totals["constructors_after"] == 0
    assert "4 of 4 FSDP1 constructors migrated (100%)" in done.stdout
    # The corpus itself is never written: the runs work on copies.
    assert {p: p.read_bytes() for p in (tmp_path / "corpus").rglob("*.py")} == before


def test_corpus_fails_under_80_percent(tmp_path):
    repository = tmp_path / "corpus" / "someone+held"
    repository.mkdir(parents=True)
    (repository / "train.py").write_text(HELD)
    done = _corpus(str(tmp_path / "corpus"), "--json", str(tmp_path / "out.json"))
    assert done.returncode == 1, done.stdout + done.stderr
    totals = json.loads((tmp_path / "out.json").read_text())["totals"]
    assert totals["constructors_before"] == totals["constructors_after"] == 1
    assert totals["half_migrated"] == totals["unmarked"] == 0
    assert "0 of 1 FSDP1 constructors migrated (0%)" in done.stdout


@pytest.fixture
def server(tmp_path):
    """An HTTP server over tmp_path/served, laid out as raw.githubusercontent.com is."""
    served = tmp_path / "served"
    served.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(served))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _fetch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fetch_corpus.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_fetch_corpus_takes_the_named_commit_and_checks_hashes(tmp_path, server):
    served, url = server
    commit = "a" * 40
    good, tampered = b"from torch.distributed.fsdp import FSDP\n", b"x = 1\n"
    entries = [
        ("org/one", "src/train.py", good, good),
        ("org/two", "fsdp.py", b"expected\n", tampered),
        ("org/three", "gone.py", b"never served\n", None),
    ]
    manifest = {"files": []}
    for repo, path, expected, content in entries:
        manifest["files"].append(
            {
                "repo": repo,
                "commit": commit,
                "path": path,
                "sha256": hashlib.sha256(expected).hexdigest(),
            }
        )
        if content is not None:
            (served / repo / commit / path).parent.mkdir(parents=True, exist_ok=True)
            (served / repo / commit / path).write_bytes(content)
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    corpus = tmp_path / "corpus"
    args = [str(corpus), "--base-url", url, "--manifest", str(tmp_path / "manifest.json")]

    done = _fetch(*args)
    assert done.returncode == 1
    assert (corpus / "org+one" / "src" / "train.py").read_bytes() == good
    assert not (corpus / "org+two" / "fsdp.py").exists()  # a wrong hash is never written
    assert "2 of 3 files not fetched" in done.stderr
    assert "org/two/" + commit + "/fsdp.py: sha256 differs" in done.stderr
    assert "org/three/" + commit + "/gone.py: HTTP Error 404" in done.stderr

    (served / "org/two" / commit / "fsdp.py").write_bytes(b"expected\n")
    (served / "org/three" / commit).mkdir(parents=True)
    (served / "org/three" / commit / "gone.py").write_bytes(b"never served\n")
    done = _fetch(*args)
    assert done.returncode == 0, done.stderr
    assert "[1/3] org/one/src/train.py: already there" in done.stderr
    assert (corpus / "org+three" / "gone.py").read_bytes() == b"never served\n"


DISPATCH = """\
from torch.distributed.fsdp import FSDPModule, MixedPrecision, MixedPrecisionPolicy
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy


def prepare(model, version):
    if not isinstance(model, (FSDP, FSDPModule)):
        if version == 1:
            precision = MixedPrecision(param_dtype=None)
        else:
            precision = MixedPrecisionPolicy()
    return model, precision, ShardingStrategy.FULL_SHARD
"""


def test_the_reading_sets_apart_names_read_only_in_dual_version_dispatches():
    """The issue's exception: an isinstance tuple with an FSDP2 class, the branch of an ``if``
    whose other branch uses FSDP2; a read anywhere else (the return line) counts."""
    from benchmarks import live_fsdp1

    reading = live_fsdp1.read("m.py", DISPATCH)
    assert sorted(reading.fsdp1_dual) == [
        "torch.distributed.fsdp.FullyShardedDataParallel",
        "torch.distributed.fsdp.MixedPrecision",
    ]
    assert reading.fsdp1_imports == ["torch.distributed.fsdp.ShardingStrategy"]
    # the same FSDP1 call with no FSDP2 branch beside it is no dispatch
    alone = live_fsdp1.read("m.py", DISPATCH.replace("MixedPrecisionPolicy()", "None"))
    assert "torch.distributed.fsdp.MixedPrecision" in alone.fsdp1_imports


def test_the_reading_follows_a_name_another_module_hands_on():
    """RLinf's shape: ``from pkg import FSDP`` where pkg imported torch's class. Read with what
    the run's modules hand on, its call is an FSDP1 constructor and its import an FSDP1 name;
    read alone, neither."""
    from benchmarks import live_fsdp1

    text = "from pkg import FSDP\n\nmodel = FSDP(net)\nmodel.clip_grad_norm_(1.0)\n"
    handed_on = {"pkg.FSDP": "torch.distributed.fsdp.FullyShardedDataParallel"}
    seen = live_fsdp1.read("m.py", text, handed_on)
    assert seen.fsdp1_constructors == 1
    assert seen.fsdp1_imports == ["torch.distributed.fsdp.FullyShardedDataParallel"]
    alone = live_fsdp1.read("m.py", text)
    assert alone.fsdp1_constructors == 0 and alone.fsdp1_imports == []


VERSIONED = """\
from torch.distributed.fsdp import FSDPModule
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def fsdp_version(model):
    if isinstance(model, FSDP):
        return 1
    elif isinstance(model, FSDPModule):
        return 2
    return 0


def offload(model):
    if fsdp_version(model) == 2:
        return
    model._handle.flat_param_to("cpu")


def collect(model):
    if fsdp_version(model) > 0:
        model._is_root = False
        return model._handle
"""


def test_the_reading_follows_version_helpers_and_skips_attribute_sets():
    """After ``if fsdp_version(model) == 2: return`` no FSDP2 model runs the FSDP1 call; a set
    attribute is no call; ``fsdp_version(model) > 0`` lets FSDP2 models through."""
    from benchmarks import live_fsdp1

    reading = live_fsdp1.read("m.py", VERSIONED)
    assert reading.live == ["m.py:22: ._handle"]
    # the helper's FSDP2 answer no longer constant: the call after its test is live too
    loose = live_fsdp1.read("m.py", VERSIONED.replace("return 2", "return model.version"))
    assert sorted(loose.live) == ["m.py:16: ._handle", "m.py:22: ._handle"]


DDP_MOVED = """\
from torch.nn.parallel import DistributedDataParallel as DDP


def step(net, other, device):
    model = DDP(net).to(device)
    with model.no_sync():
        pass
    with other.no_sync():
        pass
"""


def test_the_reading_leaves_a_ddp_model_moved_by_to():
    """``DDP(net).to(device)`` is still the DDP model: its ``no_sync`` is DDP's, not FSDP1's."""
    from benchmarks import live_fsdp1

    assert live_fsdp1.read("m.py", DDP_MOVED).live == ["m.py:8: .no_sync()"]


DDP_SCRIPT = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def train_epoch(model, batches):
    for step, batch in enumerate(batches):
        with model.no_sync() if step % 2 else torch.enable_grad():
            model(batch).sum().backward()


if __name__ == "__main__":
    train_epoch(DDP(torch.nn.Linear(2, 2)), [])
"""
FSDP_SCRIPT = """\
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

if __name__ == "__main__":
    FSDP(torch.nn.Linear(2, 2))
"""


def test_a_ddp_script_of_its_own_has_no_migrated_model(tmp_path):
    """A DDP script beside an FSDP one (GeorgianTTS): its ``no_sync()`` is DDP's, on models
    that never were FSDP1's. Once the FSDP script imports it, it is no program of its own:
    its helper may get an FSDP model."""
    from benchmarks.corpus import programs_of_their_own

    repository = tmp_path / "corpus" / "someone+two_scripts"
    repository.mkdir(parents=True)
    (repository / "train_fsdp.py").write_text(FSDP_SCRIPT)
    (repository / "train_ddp.py").write_text(DDP_SCRIPT)
    paths = [str(repository / "train_fsdp.py"), str(repository / "train_ddp.py")]
    assert programs_of_their_own(paths) == frozenset(paths)
    done = _corpus(str(tmp_path / "corpus"), "--json", str(tmp_path / "out.json"))
    assert done.returncode == 0, done.stdout + done.stderr
    totals = json.loads((tmp_path / "out.json").read_text())["totals"]
    assert totals["constructors_after"] == 0 and totals["live_on_migrated"] == 0
    (repository / "train_fsdp.py").write_text("from train_ddp import train_epoch\n" + FSDP_SCRIPT)
    assert programs_of_their_own(paths) == frozenset(paths[:1])


def test_uncalled_functions_are_those_no_file_spells_again(tmp_path):
    """The benchmark's own reading of code a whole program never runs (independent of the
    codemod's ``programs.unreached``): module-level functions without decorators whose name
    no file spells again, comments included; a call there is counted apart, not as live."""
    from benchmarks.corpus import _in, uncalled

    helpers = tmp_path / "helpers.py"
    helpers.write_text(
        "def used():\n    pass\n\n\ndef unused(m):\n    m.no_sync()\n\n\n"
        "@register\ndef decorated(m):\n    m.no_sync()\n\n\n"
        "def mentioned(m):\n    m.no_sync()\n"
    )
    (tmp_path / "train.py").write_text("from helpers import used\nused()  # not mentioned\n")
    spans = uncalled([str(helpers), str(tmp_path / "train.py")])
    assert spans == {str(helpers): [(5, 6)]}
    assert _in(spans, f"{helpers}:6: .no_sync()") and not _in(spans, f"{helpers}:11: .no_sync()")
