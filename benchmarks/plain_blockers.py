"""What keeps FSDP1 constructors from the plain ``fully_shard`` form, over a corpus.

    python benchmarks/plain_blockers.py CORPUS_DIR [CORPUS_DIR ...]

Each repository (a folder of ``CORPUS_DIR``) is one run (the keys of its keyword-argument
dicts read across its files, ``fsdp2_port.codemods.spreads``). Each constructor of the corpus
(``functools.partial`` factories aside) is read as the constructors rule reads it
(``fsdp2_port.codemods.rules.constructors.pure``), file by file; the script
counts the constructors each blocker stops (one constructor often has several), and those a
single blocker stops alone: the plain forms that would free most constructors. A ``**kwargs``
that cannot be read stops the reading of its call, so that call's other blockers are not
counted.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fsdp2_port.codemods import engine, fsdp1, sources, spreads
from fsdp2_port.codemods.analysis import FileAnalysis, Source
from fsdp2_port.codemods.options import Options
from fsdp2_port.codemods.rules.constructors.pure import pure


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpora", type=Path, nargs="+", help="folders of Python files")
    args = parser.parse_args()
    each: Counter = Counter()
    alone: Counter = Counter()
    total = plain = 0
    repositories = [r for corpus in args.corpora for r in sorted(corpus.iterdir()) if r.is_dir()]
    for repository in repositories:
        files, _ = sources.discover([str(repository)])
        keys = spreads.find(sources.fsdp_files(files, engine.module_name))  # as in a run
        for path in files:
            data = Path(path).read_bytes()
            if not fsdp1.might_need_migration(data):
                continue
            try:
                text = sources.decode(data).text
                source = Source(path, text, *engine.module_name(path), spreads=keys)
                analysis = FileAnalysis(source, Options())
            except (sources.UnreadableSource, SyntaxError, ValueError):
                continue
            for call in analysis.ties.constructors:
                if call in analysis.ties.factories:
                    continue
                total += 1
                blockers = sorted({b.split(":")[0] for b in pure(analysis, call).blockers})
                plain += not blockers
                each.update(blockers)
                if len(blockers) == 1:
                    alone.update(blockers)
    print(f"{total} FSDP1 constructors, {plain} with a plain form")
    print("constructors stopped by each blocker:")
    for blocker, count in each.most_common():
        print(f"  {count:4d}  {blocker}")
    print("constructors stopped by that blocker alone:")
    for blocker, count in alone.most_common():
        print(f"  {count:4d}  {blocker}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
