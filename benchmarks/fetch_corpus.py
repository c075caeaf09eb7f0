"""Download the real FSDP1 files that ``benchmarks/corpus.py`` measures the codemod on.

    python benchmarks/fetch_corpus.py CORPUS_DIR [--base-url URL] [--timeout 30] [--manifest M]

Each file of ``benchmarks/corpus_manifest.json`` is fetched from the commit named there
(``{base-url}/{owner}/{name}/{commit}/{path}``, GitHub's raw files by default) into
``CORPUS_DIR/{owner}+{name}/{path}`` and must match its sha256. A file already there with the
right hash is kept, so an interrupted run picks up where it stopped. The files stay under their
repositories' licenses (named in the manifest); they are not part of this project.

Exit 0 when every file is in place, 1 when some could not be fetched or did not match (each
listed), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

MANIFEST = Path(__file__).with_name("corpus_manifest.json")


def target(corpus: Path, entry: dict) -> Path:
    """Where corpus.py expects the file: one folder per repository."""
    return corpus / entry["repo"].replace("/", "+") / entry["path"]


def fetch(url: str, timeout: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path, help="folder to fill (created if missing)")
    parser.add_argument("--base-url", default="https://raw.githubusercontent.com")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per file")
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    args = parser.parse_args(argv)

    files = json.loads(args.manifest.read_text(encoding="utf-8"))["files"]
    failed = []
    for number, entry in enumerate(files, 1):
        path = target(args.corpus, entry)
        label = f"[{number}/{len(files)}] {entry['repo']}/{entry['path']}"
        if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"]:
            print(f"{label}: already there", file=sys.stderr)
            continue
        url = f"{args.base_url.rstrip('/')}/{entry['repo']}/{entry['commit']}/{entry['path']}"
        try:
            data = fetch(url, args.timeout)
        except (urllib.error.URLError, OSError) as error:
            failed.append(f"{url}: {error}")
            print(f"{label}: FAILED ({error})", file=sys.stderr)
            continue
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            failed.append(f"{url}: sha256 differs from the manifest's")
            print(f"{label}: FAILED (sha256 differs)", file=sys.stderr)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".part")
        partial.write_bytes(data)
        partial.replace(path)
        print(f"{label}: fetched", file=sys.stderr)

    if failed:
        print(f"{len(failed)} of {len(files)} files not fetched:", file=sys.stderr)
        for line in failed:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"{len(files)} files in {args.corpus}; now: python benchmarks/corpus.py {args.corpus}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
