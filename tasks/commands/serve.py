"""``multimodal serve``: a local web page to play with a model (Gradio; ``pip install -e '.[serve]'``)."""

from __future__ import annotations

import argparse
import os

from tasks.arguments import positive_int
from tasks.serve.checks import CONCURRENCY, MAX_UPLOAD, QUEUE_SIZE


def serve_command(argv: list[str]) -> None:
    """``multimodal serve [--checkpoint CKPT_OR_FOLDER | --model NAME]``: the page suited to the model's task, on
    this machine; without either, the music model that ships with the package."""
    from tasks.commands.checkpoint import add_inference_arguments, add_model_arguments, model_path

    parser = argparse.ArgumentParser(prog="multimodal serve", description=serve_command.__doc__)
    add_model_arguments(parser, required=False)
    parser.add_argument("--port", type=positive_int, default=7860)
    parser.add_argument("--host", default="127.0.0.1", help="127.0.0.1: this machine only; 0.0.0.0: the network")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--concurrency", type=positive_int, default=CONCURRENCY, help="requests computed at once")
    parser.add_argument("--queue-size", type=positive_int, default=QUEUE_SIZE,
                        help="requests waiting beyond those; more are told at once that the queue is full")  # fmt: skip
    add_inference_arguments(parser)
    args = parser.parse_args(argv)
    if args.checkpoint is None and args.model is None:
        path = model_path(parser, None, "music", option="the default model")
    else:
        path = model_path(parser, args.checkpoint, args.model)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # the page calls nowhere but its own server
    try:
        import gradio  # noqa: F401
    except ImportError:
        parser.error("--checkpoint: the page needs Gradio, the `serve` extra: pip install -e '.[serve]'")
    import torch

    from tasks.checkpoint import load_task
    from tasks.commands.checkpoint import apply_inference_arguments, check_device
    from tasks.serve import build_page

    if args.device is not None:
        check_device(parser, args.device)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    task, tokenizer, data = load_task(path, map_location=device)
    apply_inference_arguments(parser, task.model, args)
    page = build_page(task, tokenizer, data, path, args.concurrency, args.queue_size)
    print(f"serving {type(task).__name__} from {path} at http://{args.host}:{args.port} (Ctrl-C stops)")
    page.launch(server_name=args.host, server_port=args.port, show_error=True, max_file_size=MAX_UPLOAD)
