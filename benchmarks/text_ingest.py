"""Text ingest at corpus scale: megabytes per second into the sharded token cache, and the memory it takes.

A folder of ``--gigabytes`` of text is made once by copying the standard library's source (each
copy under its own folder, so every file is a distinct document), then
:func:`multimodal.data.text_cache.tokenize_files` encodes all of it with the built-in 8,000-token BPE
into a fresh cache (shards of ``--shard-mib``). Printed: MB/s of source text, tokens, shards, and
the peak resident memory of the process against the size of the corpus (memory must not grow
with it: documents are encoded a batch at a time and written straight to disk).

Usage::

    flock /tmp/bench.lock .venv/bin/python benchmarks/text_ingest.py                 # 1 GB
    .venv/bin/python benchmarks/text_ingest.py --gigabytes 0.05                      # a quick look
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

from multimodal.data.storage import cache_root
from multimodal.data.text import stdlib_tokenizer
from multimodal.data.text_cache import ShardedTokens, tokenize_files
from multimodal.data.text_files import stdlib_files, stdlib_root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gigabytes", type=float, default=1.0)
    parser.add_argument("--shard-mib", type=int, default=256)
    parser.add_argument("--folder", type=Path, default=cache_root() / "benchmarks" / "text_corpus")
    args = parser.parse_args()
    files = make_corpus(args.folder, int(args.gigabytes * 1e9))
    total = sum(path.stat().st_size for path in files)
    tokenizer = stdlib_tokenizer(8000)
    cache = Path(tempfile.mkdtemp(prefix="token-cache-"))
    try:
        before = _peak_mib()
        start = time.perf_counter()
        stream = tokenize_files(files, tokenizer, cache, shard_bytes=args.shard_mib * 2**20)
        seconds = time.perf_counter() - start
        shards = len(stream.shards) if isinstance(stream, ShardedTokens) else 1
        print(f"{len(files):,} files, {total / 1e6:,.0f} MB of text -> {len(stream):,} tokens in {shards} shard(s)")
        print(f"{total / 1e6 / seconds:.1f} MB/s ({seconds:.0f} s); peak resident memory {_peak_mib():.0f} MiB "
              f"({before:.0f} MiB before); corpus {total / 2**20:,.0f} MiB")  # fmt: skip
    finally:
        shutil.rmtree(cache)


def make_corpus(folder: Path, size: int) -> list[Path]:
    """Copies of the standard library's ``.py`` files until ``size`` bytes (made once, then reused)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = sorted(folder.rglob("*.py"))
    if sum(path.stat().st_size for path in files) >= size:
        return _first(files, size)
    root, source = stdlib_root(), stdlib_files()
    copy, written = 0, 0
    while written < size:
        for path in source:
            target = folder / f"copy{copy:03d}" / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            written += target.stat().st_size
            if written >= size:
                break
        copy += 1
    return _first(sorted(folder.rglob("*.py")), size)


def _first(files: list[Path], size: int) -> list[Path]:
    chosen, total = [], 0
    for path in files:
        if total >= size:
            break
        chosen.append(path)
        total += path.stat().st_size
    return chosen


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    main()
