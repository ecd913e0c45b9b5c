"""The text page: a prompt, continued and shown as it is decoded."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from multimodal.generation import SamplingConfig
from multimodal.text import stream_text
from tasks.serve.checks import SEEDS, bounded

TEMPERATURE, TOP_P = (0.0, 1.5), (0.5, 1.0)  # the widgets' bounds, checked again in the function (the API)
NEW_TOKENS = (8, 1024)  # the same for the length: a request cannot ask for 10**9 tokens


class TextSession:
    """What the page does, without the page: stream a continuation of a prompt.

    Args:
        task: A ``LanguageModeling`` task (its model in eval mode).
        tokenizer: Its text tokenizer.
    """

    def __init__(self, task: Any, tokenizer: Any) -> None:
        self.task, self.tokenizer = task, tokenizer

    def continue_prompt(self, prompt: str, length: int, temperature: float, top_p: float, seed: int) -> Iterator[str]:
        """The prompt and its continuation so far, after each decoded piece (a message instead, for bad settings);
        a ``gradio.Error`` for a setting outside its widget's bounds."""
        length = int(bounded("new tokens", length, *NEW_TOKENS, whole=True))
        temperature = bounded("temperature", temperature, *TEMPERATURE)
        top_p = bounded("top-p", top_p, *TOP_P)
        seed = int(bounded("seed", seed, *SEEDS, whole=True))
        sampling = SamplingConfig(temperature=temperature, top_p=top_p)
        text = prompt or ""
        try:
            for piece in stream_text(self.task.model, self.tokenizer, text, int(length), sampling, seed=int(seed)):
                text += piece
                yield text
        except ValueError as error:  # e.g. a prompt too long for a learned-position model
            yield f"{text}\n\n[{error}]"
            return
        yield text


def text_page(task: Any, tokenizer: Any) -> Any:
    """The Gradio page of a text checkpoint."""
    import gradio as gr

    session = TextSession(task, tokenizer)
    with gr.Blocks(title="multimodal: text") as page:
        gr.Markdown(f"# Text\n{type(task.model).__name__}: write a prompt; the continuation appears as it is decoded.")
        prompt = gr.Textbox(label="prompt", lines=4)
        with gr.Row():
            length = gr.Slider(*NEW_TOKENS, value=200, step=8, label="new tokens")
            temperature = gr.Slider(*TEMPERATURE, value=0.8, step=0.05, label="temperature (0: greedy)")
            top_p = gr.Slider(*TOP_P, value=0.95, step=0.01, label="top-p")
            seed = gr.Number(0, precision=0, minimum=SEEDS[0], maximum=SEEDS[1], label="seed")
        button = gr.Button("Continue", variant="primary")
        output = gr.Textbox(label="text", lines=16)
        button.click(session.continue_prompt, [prompt, length, temperature, top_p, seed], output, api_name="continue")
    return page
