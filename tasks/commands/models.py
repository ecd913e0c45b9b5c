"""``multimodal models``: the models that ship inside the package (:mod:`multimodal.pretrained`)."""

from __future__ import annotations

import argparse


def models_command(argv: list[str]) -> None:
    """``multimodal models``: lists each shipped model with its size, whether its files match their checksums,
    and what it is; ``--model NAME`` of ``generate``, ``serve`` and ``sample-stats`` takes the name."""
    parser = argparse.ArgumentParser(prog="multimodal models", description=models_command.__doc__)
    parser.parse_args(argv)
    from multimodal.pretrained import HERE, SHIPPED, verify

    for name, about in SHIPPED.items():
        folder = HERE / name
        if not (folder / "model.safetensors").is_file():
            print(f"{name:<8} missing from this installation ({folder})")
            continue
        size = sum(path.stat().st_size for path in folder.iterdir() if path.is_file()) / 2**20
        changed = verify(folder)
        state = "checksums match" if not changed else f"CHANGED: {', '.join(changed)}"
        print(f"{name:<8} {size:5.1f} MiB  {state}  {folder}\n         {about}")
