"""``multimodal serve``: a local web page to play with a model (Gradio; ``pip install -e '.[serve]'``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from tasks.arguments import positive_int


def serve_command(argv: list[str]) -> None:
    """``multimodal serve --checkpoint CKPT_OR_FOLDER``: the page suited to the checkpoint's task, on this machine."""
    parser = argparse.ArgumentParser(prog="multimodal serve", description=serve_command.__doc__)
    parser.add_argument("--checkpoint", type=Path, required=True,
                        help="a .ckpt, a run folder (its best checkpoint) or a model folder (multimodal export)")  # fmt: skip
    parser.add_argument("--port", type=positive_int, default=7860)
    parser.add_argument("--host", default="127.0.0.1", help="127.0.0.1: this machine only; 0.0.0.0: the network")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    args = parser.parse_args(argv)
    if not args.checkpoint.exists():
        parser.error(f"checkpoint not found: {args.checkpoint}")
    try:
        import gradio  # noqa: F401
    except ImportError:
        parser.error("--checkpoint: the page needs Gradio, the `serve` extra: pip install -e '.[serve]'")
    import torch

    from tasks.checkpoint import load_task
    from tasks.serve import build_page

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    task, tokenizer = load_task(args.checkpoint, map_location=device)
    page = build_page(task, tokenizer, args.checkpoint)
    print(f"serving {type(task).__name__} from {args.checkpoint} at http://{args.host}:{args.port} (Ctrl-C stops)")
    page.launch(server_name=args.host, server_port=args.port, show_error=True)
