"""The commands that work on a trained checkpoint: ``multimodal generate`` and ``multimodal perplexity``.

Both read ``--checkpoint`` first, rebuild its task without unpickling (:func:`tasks.checkpoint.load_task`),
and hand the rest to the command module of the checkpoint's task (:data:`tasks.commands.TASK_COMMANDS`:
``add_generate_arguments`` / ``run_generate``, ``add_perplexity_arguments`` / ``run_perplexity``),
with the model, its tokenizer and the run's data settings. A task without the command is refused with one line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tasks.arguments import non_negative_float, positive_int, probability


def generate_command(argv: list[str]) -> None:
    """``multimodal generate``: the options after ``--checkpoint`` depend on the checkpoint's task."""
    parser = argparse.ArgumentParser(prog="multimodal generate", description=generate_command.__doc__)
    parser.add_argument("--out", type=Path, default=Path("outputs/generate"), help="output folder or file")
    parser.add_argument("--temperature", type=non_negative_float, default=1.0, help="0: greedy")
    parser.add_argument("--top-k", type=positive_int, default=None, help="keep the k most likely tokens")
    parser.add_argument("--top-p", type=probability, default=None, help="nucleus sampling, in (0, 1]")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--overwrite", action="store_true", help="replace files that already exist")
    _run_task_command("generate", parser, argv, "generates nothing")


def perplexity_command(argv: list[str]) -> None:
    """``multimodal perplexity``: text files (nats per token, bits per byte) or MIDI files (nats per
    event, note and second), per file and in total; the options depend on the checkpoint's task."""
    parser = argparse.ArgumentParser(prog="multimodal perplexity", description=perplexity_command.__doc__)
    _run_task_command("perplexity", parser, argv, "scores no files (perplexity is for text and music models)")


def _run_task_command(name: str, parser: argparse.ArgumentParser, argv: list[str], refusal: str) -> None:
    """Adds ``--checkpoint`` or ``--model`` / ``--device`` and the options of the checkpoint's task's command
    module, and runs its ``run_<name>``."""
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--checkpoint", type=Path)
    first.add_argument("--model")
    first.add_argument("--device", default=None)
    known, _ = first.parse_known_args(argv)
    add_model_arguments(parser)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    add_inference_arguments(parser)
    loaded = run = None
    path = model_path(parser, known.checkpoint, known.model, quiet=bool({"-h", "--help"} & set(argv)))
    if path is not None:
        import torch

        from tasks.checkpoint import load_for_commands
        from tasks.commands import task_commands

        device = known.device or ("cuda" if torch.cuda.is_available() else "cpu")
        check_device(parser, device)  # before loading: a bad device is not a bad checkpoint
        loaded = load_for_commands(path, map_location=device)
        commands = task_commands(loaded.task_name)
        add_arguments = getattr(commands, f"add_{name}_arguments", None)
        run = getattr(commands, f"run_{name}", None)
        if add_arguments is not None:
            add_arguments(parser)  # without run_<name>, it may explain what to run instead, and exit
        if run is None:
            parser.error(f"{path}: a {loaded.task_name} checkpoint {refusal}")
    else:
        parser.add_argument("rest", nargs="*", help="the options of the checkpoint's task")
    args = parser.parse_args(argv)
    if name == "generate":
        _check_decoding(parser, args)
    apply_inference_arguments(parser, loaded.model, args)
    args.model_source = path  # the checkpoint or model folder, for what the run's data showed (its ranges)
    run(loaded.model, loaded.tokenizer, args, loaded.data)


#: ``multimodal.layers.quantize``'s WEIGHT_SCHEMES and KV_CACHE_DTYPES, named here so ``--help`` imports no torch
#: (tests/layers/test_quantize.py holds them equal).
QUANTIZE_CHOICES, KV_CACHE_CHOICES = ("int8", "float16"), ("float32", "float16", "bfloat16")


def add_inference_arguments(parser: argparse.ArgumentParser) -> None:
    """``--quantize int8|float16`` and ``--kv-cache float16|bfloat16``: reduced-precision inference on a CPU (docs/text.md)."""
    parser.add_argument("--quantize", choices=QUANTIZE_CHOICES, default=None,
                        help="int8 weights (per-channel scales, a quarter of the bytes) or float16 weights (half, "
                             "closer to float32): faster decoding on a CPU (docs/text.md)")
    parser.add_argument("--kv-cache", choices=KV_CACHE_CHOICES, default=None,
                        help="store the decoding caches in this dtype (float16: half the memory)")  # fmt: skip


def apply_inference_arguments(parser: argparse.ArgumentParser, model, args: argparse.Namespace) -> None:
    """Quantizes ``model`` and sets its KV-cache dtype as ``args`` ask; a kernel this machine lacks is one line."""
    from multimodal.layers.quantize import quantize_model, set_kv_cache_dtype

    if args.quantize is not None:
        try:
            quantize_model(model, args.quantize)
        except ValueError as error:
            parser.error(f"--quantize {args.quantize}: {error}")
    set_kv_cache_dtype(model, args.kv_cache)


def add_model_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """``--checkpoint PATH`` or ``--model NAME_OR_FOLDER`` (one of the two, ``required`` or not)."""
    source = parser.add_mutually_exclusive_group(required=required)
    source.add_argument("--checkpoint", type=Path,
                        help="a .ckpt written by `multimodal fit`, a run folder (its best checkpoint) or a model folder")
    source.add_argument("--model",
                        help="a model that ships with the package (`multimodal models` lists them: music) or a "
                             "model folder")  # fmt: skip


def model_path(parser: argparse.ArgumentParser, checkpoint: Path | None, model: str | None, option: str = "--model",
               quiet: bool = False) -> Path | None:  # fmt: skip
    """The file or folder ``--checkpoint`` or ``--model`` (``option``: how the user named it) means; None when
    neither is given. One line through ``parser.error`` for a missing one, or None with ``quiet`` (``--help``)."""
    if checkpoint is not None and model is not None:
        parser.error(f"--checkpoint, {option}: give one of them")
    path, named = checkpoint, f"--checkpoint {checkpoint}"
    if model is not None:
        from multimodal.pretrained import SHIPPED, resolve_model

        named = f"{option} {model}"
        try:
            path = resolve_model(model)
        except (ValueError, OSError) as error:
            if quiet:
                return None
            parser.error(f"{named}: {getattr(error, 'strerror', None) or error}")
        if not path.exists() and not quiet:
            parser.error(f"{named}: neither a shipped model ({', '.join(SHIPPED)}) nor a model folder or checkpoint")
    if path is not None and not path.exists():
        if quiet:
            return None
        parser.error(f"{named}: no such checkpoint file or folder")  # before the task's options
    return path


#: Options only sampling uses. Beam search (``--num-beams N``, N > 1) is deterministic and refuses
#: them, as :class:`multimodal.generation.SamplingConfig` does, rather than ignore them; refused here
#: first, with the options' names as typed (:func:`tasks.arguments.sampling_from_args` then builds the config).
SAMPLING_OPTIONS = ("temperature", "top_k", "top_p", "seed", "min_p", "repetition_penalty", "no_repeat_ngram_size",
                    "min_new_tokens", "stream", "guidance_scale", "key_emphasis")  # fmt: skip


def _check_decoding(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuses options the chosen decoding would ignore, and lengths that cannot both hold."""

    def given(name: str) -> bool:
        return hasattr(args, name) and getattr(args, name) != parser.get_default(name)

    beams = getattr(args, "num_beams", 1)
    if beams > 1:
        refused = ["--" + name.replace("_", "-") for name in SAMPLING_OPTIONS if given(name)]
        if refused:
            parser.error(f"--num-beams {beams}: num_beams > 1 is deterministic beam search; it does not take "
                         f"{', '.join(refused)}")  # fmt: skip
    elif given("length_penalty"):
        parser.error("--length-penalty: only beam search uses it; add --num-beams N (N > 1)")
    low, high = getattr(args, "min_new_tokens", None), getattr(args, "max_new_tokens", None)
    if low is not None and high is not None and low > high:
        parser.error(f"--min-new-tokens {low}: more than --max-new-tokens {high}")


def check_device(parser: argparse.ArgumentParser, device: str) -> None:
    """Refuses a ``--device`` torch does not know, or one this machine does not have."""
    import torch

    try:
        kind = torch.device(device).type
    except (RuntimeError, ValueError, TypeError):
        parser.error(f"--device {device}: not a device; use cpu, cuda, cuda:N or mps")
    if kind not in ("cpu", "cuda", "mps"):
        parser.error(f"--device {device}: use cpu, cuda, cuda:N or mps")
    if kind == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {device}: no CUDA device on this machine")
    if kind == "cuda" and torch.device(device).index is not None and torch.device(device).index >= torch.cuda.device_count():
        parser.error(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if kind == "mps" and not torch.backends.mps.is_available():
        parser.error(f"--device {device}: no MPS device on this machine")
