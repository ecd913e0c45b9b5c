"""``multimodal serve``: a local web page to play with a model (Gradio; ``pip install -e '.[serve]'``)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from tasks.arguments import positive_int
from tasks.serve.checks import CONCURRENCY, MAX_UPLOAD, QUEUE_SIZE


def serve_command(argv: list[str]) -> None:
    """``multimodal serve --checkpoint CKPT_OR_FOLDER``: the page suited to the checkpoint's task, on this machine."""
    parser = argparse.ArgumentParser(prog="multimodal serve", description=serve_command.__doc__)
    parser.add_argument("--checkpoint", type=Path, required=True,
                        help="a .ckpt, a run folder (its best checkpoint) or a model folder (multimodal export)")  # fmt: skip
    parser.add_argument("--port", type=positive_int, default=7860)
    parser.add_argument("--host", default="127.0.0.1", help="127.0.0.1: this machine only; 0.0.0.0: the network")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--concurrency", type=positive_int, default=CONCURRENCY, help="requests computed at once")
    parser.add_argument("--queue-size", type=positive_int, default=QUEUE_SIZE,
                        help="requests waiting beyond those; more are told at once that the queue is full")  # fmt: skip
    args = parser.parse_args(argv)
    if not args.checkpoint.exists():
        parser.error(f"checkpoint not found: {args.checkpoint}")
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # the page calls nowhere but its own server
    try:
        import gradio  # noqa: F401
    except ImportError:
        parser.error("--checkpoint: the page needs Gradio, the `serve` extra: pip install -e '.[serve]'")
    import torch

    from tasks.checkpoint import load_task
    from tasks.commands.checkpoint import check_device
    from tasks.serve import build_page

    if args.device is not None:
        check_device(parser, args.device)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    task, tokenizer, data = load_task(args.checkpoint, map_location=device)
    page = build_page(task, tokenizer, data, args.checkpoint, args.concurrency, args.queue_size)
    print(f"serving {type(task).__name__} from {args.checkpoint} at http://{args.host}:{args.port} (Ctrl-C stops)")
    page.launch(server_name=args.host, server_port=args.port, show_error=True, max_file_size=MAX_UPLOAD)
