"""Nothing lost, nothing silently wrong: runs never share a folder, outputs are not replaced unasked,
options that would be ignored or mean nothing are refused in one line (exit status 2). Each case is
a row of docs/reliability.md."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_reliability import MUSIC, TEXT, one_line_error, runs  # noqa: F401  (runs: a module fixture)

from tasks.cli import main
from tasks.runs import LOCK, RUNS, claim_run

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
IMAGES = ["--config", str(CONFIGS / "image_classification.yaml"),
          "--config", str(CONFIGS / "image_classification_tiny.yaml")]  # fmt: skip


def _command(args, cwd) -> subprocess.Popen:
    """``multimodal ARGS`` in a fresh process, as a user starts it (no --debug)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MULTIMODAL_DEBUG": "0"}
    return subprocess.Popen([sys.executable, "-m", "tasks.cli", *map(str, args)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def _finish(process: subprocess.Popen) -> tuple[int, str]:
    _, err = process.communicate(timeout=600)
    return process.returncode, err


def _error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err
    return lines[-1]


# ----------------------------------------------------------------------------------------- runs
def test_two_fits_started_together_with_one_run_name_one_runs_one_is_refused(tmp_path):
    fit = ["fit", *MUSIC, "--trainer.max_steps", "1", "--run_name", "same"]
    results = [_finish(process) for process in [_command(fit, tmp_path) for _ in range(2)]]

    assert sorted(code for code, _ in results) == [0, 2], [err[-500:] for _, err in results]  # exactly one ran
    refused = _error_line(next(err for code, err in results if code == 2))
    # Refused by the lock while the other runs, or, when the other has already finished its step, as a
    # run that exists: either way one line naming the run's folder.
    assert refused.startswith("error: ") and "lightning_logs/same" in refused
    run = tmp_path / "outputs/music_continuation" / RUNS / "same"
    assert [path.name for path in (run / "checkpoints").iterdir()] == ["last.ckpt"]  # no last-v1.ckpt
    assert len(list(run.glob("events.out.tfevents.*"))) == 1  # one writer
    assert not (run / LOCK).exists()  # released at the end


def test_processes_choosing_the_next_version_together_each_get_their_own(tmp_path):
    claim = "from tasks.runs import claim_run; print(claim_run('.').folder.name)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    processes = [subprocess.Popen([sys.executable, "-c", claim], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                  text=True) for _ in range(6)]  # fmt: skip
    names = sorted(process.communicate(timeout=60)[0].strip() for process in processes)
    assert names == [f"version_{n}" for n in range(6)]  # one each, none shared
    assert not list((tmp_path / RUNS).glob(f"*/{LOCK}"))  # released at exit


def test_a_live_lock_refuses_a_stale_one_is_taken_over(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "outputs/music_continuation"
    claim = claim_run(root, "busy")  # this process holds it, as a running fit would
    try:
        line = one_line_error(["fit", *MUSIC, "--trainer.max_steps", "1", "--run_name", "busy"], capsys, monkeypatch)
        assert "busy" in line and str(os.getpid()) in line and LOCK in line
        with pytest.raises(FileExistsError):
            claim_run(root, "busy")
    finally:
        claim.release()
    assert not (root / RUNS / "busy" / LOCK).exists()

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    crashed = root / RUNS / "crashed"
    crashed.mkdir(parents=True)
    (crashed / LOCK).write_text(f'{{"pid": {int(dead.stdout)}, "host": "{socket.gethostname()}", "started": null}}')
    main(["fit", *MUSIC, "--trainer.max_steps", "1", "--run_name", "crashed"])  # a killed run's lock: taken over
    assert (crashed / "checkpoints/last.ckpt").is_file() and not (crashed / LOCK).exists()


@pytest.mark.parametrize("name", ["../../x", "a/b", "ABSOLUTE", "..", "a\\b"])
def test_a_run_name_is_a_name_not_a_path(tmp_path, capsys, monkeypatch, name):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    name = str(tmp_path / "elsewhere") if name == "ABSOLUTE" else name
    line = one_line_error(["fit", *MUSIC, "--run_name", name], capsys, monkeypatch)
    assert "--run_name" in line and "not a path" in line
    assert [path.name for path in tmp_path.rglob("*")] == ["work"]  # nothing created, here or elsewhere


def test_a_data_parallel_run_claims_its_folder_once(tmp_path):
    code, err = _finish(_command(["fit", *TEXT, "--config", CONFIGS / "ddp.yaml", "--trainer.accelerator", "cpu",
                                  "--trainer.devices", "2", "--trainer.max_steps", "1", "--trainer.limit_val_batches", "0",
                                  "--run_name", "pair"], tmp_path))  # fmt: skip
    assert code == 0, err[-2000:]  # the second process (it re-runs the command) does not refuse its own run
    runs_folder = tmp_path / "outputs/text_lm" / RUNS
    assert [path.name for path in runs_folder.iterdir()] == ["pair"]
    assert (runs_folder / "pair/checkpoints/last.ckpt").is_file() and not (runs_folder / "pair" / LOCK).exists()


# -------------------------------------------------------------------------------------- outputs
def test_predict_does_not_replace_predictions_unless_asked(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main(["fit", *IMAGES, "--trainer.max_steps", "1"])
    predictions = tmp_path / "outputs/image_classification/predictions.csv"
    predictions.write_text("my own table\n")
    predict = ["predict", *IMAGES, "--ckpt_path", "outputs/image_classification"]
    line = one_line_error(predict, capsys, monkeypatch)
    assert str(predictions.relative_to(tmp_path)) in line and "--overwrite" in line
    assert predictions.read_text() == "my own table\n"
    main([*predict, "--overwrite"])
    assert predictions.read_text().startswith("file,prediction,probability")


def test_exported_weights_have_the_mode_of_the_other_files(runs, tmp_path):  # noqa: F811
    main(["export", "--checkpoint", str(runs["music"]), "--out", str(tmp_path / "model")])
    mask = os.umask(0o022)
    os.umask(mask)
    modes = {path.name: path.stat().st_mode & 0o777 for path in (tmp_path / "model").iterdir()}
    assert modes["model.safetensors"] == 0o666 & ~mask and set(modes.values()) == {0o666 & ~mask}, modes
    from multimodal.data.storage import atomic_write_text

    assert atomic_write_text(tmp_path / "cached.json", "{}").stat().st_mode & 0o777 == 0o666 & ~mask


# --------------------------------------------------------------------------- options and inputs
@pytest.mark.parametrize(("option", "value"), [("--batch-size", "-1"), ("--seq-len", "-5"), ("--seq-len", "0")])
def test_perplexity_refuses_sizes_that_would_score_nothing(runs, tmp_path, capsys, monkeypatch, option, value):  # noqa: F811
    import pretty_midi

    midi = pretty_midi.PrettyMIDI()
    midi.instruments.append(pretty_midi.Instrument(0))
    midi.instruments[0].notes = [pretty_midi.Note(80, 60, 0.0, 0.5), pretty_midi.Note(80, 64, 0.5, 1.0)]
    piece = tmp_path / "piece.mid"
    midi.write(str(piece))
    line = one_line_error(["perplexity", "--checkpoint", runs["music"], piece, option, value], capsys, monkeypatch)
    assert option in line and value in line


def test_the_library_scores_no_music_with_meaningless_sizes(runs):  # noqa: F811
    import numpy as np

    from multimodal.music import score_music
    from tasks.checkpoint import load_task

    task, tokenizer, _ = load_task(runs["music"])
    notes = np.array([[60, 0.0, 0.5, 80]])
    for sizes in ({"seq_len": -5}, {"batch_size": -1}, {"seq_len": 0}):
        with pytest.raises(ValueError, match=next(iter(sizes))):
            score_music(task.model, tokenizer, notes, **{"seq_len": 16, "batch_size": 2, **sizes})


@pytest.mark.parametrize(("argv", "expected"), [
    (["--num-beams", "3", "--top-p", "0.5", "--temperature", "2"], "it does not take --temperature, --top-p"),
    (["--num-beams", "2", "--min-new-tokens", "3"], "it does not take --min-new-tokens"),
    (["--length-penalty", "2"], "--length-penalty: only beam search"),
    (["--num-beams", "2", "--length-penalty", "nan"], "--length-penalty: nan is not a finite number"),
    (["--temperature", "inf"], "--temperature: inf is not a finite number"),
    (["--repetition-penalty", "inf"], "--repetition-penalty: inf is not a finite number"),
    (["--min-new-tokens", "9", "--max-new-tokens", "4"], "--min-new-tokens 9: more than --max-new-tokens 4"),
    (["--prompt", "Once", "--prompt-file", "prompts.txt"], "--prompt-file: not allowed with argument --prompt"),
], ids=["beams-and-sampling", "beams-and-shaping", "penalty-without-beams", "nan", "inf", "inf-penalty",
        "min-over-max", "prompt-and-file"])  # fmt: skip
def test_generate_refuses_options_it_would_ignore_or_that_mean_nothing(runs, tmp_path, capsys, monkeypatch, argv,  # noqa: F811
                                                                       expected):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    Path("prompts.txt").write_text("A line\n")
    line = one_line_error(["generate", "--checkpoint", runs["text"], "--out", "story.txt", *argv], capsys, monkeypatch)
    assert expected in line
    assert not Path("story.txt").exists()


def test_beam_search_refuses_sampling_in_the_cli_as_in_the_library(runs, tmp_path, capsys, monkeypatch):  # noqa: F811
    from multimodal.generation import generate
    from tasks.checkpoint import load_task

    task, _, _ = load_task(runs["music"])
    with pytest.raises(ValueError, match="num_beams > 1 is deterministic beam search; it does not take") as library:
        generate(task.model, torch.tensor([[1, 5]]), 4, num_beams=2, temperature=2.0)
    line = one_line_error(["generate", "--checkpoint", runs["music"], "--out", tmp_path / "o", "--num-beams", "2",
                           "--seed", "3"], capsys, monkeypatch)  # fmt: skip
    assert str(library.value).split(";")[0] in line and "--seed" in line
    assert not (tmp_path / "o").exists()


def test_a_missing_checkpoint_is_reported_before_the_tasks_options(tmp_path, capsys, monkeypatch):
    missing = tmp_path / "gone.ckpt"
    line = one_line_error(["generate", "--checkpoint", missing, "--primer", "x.mid", "--num-samples", "2"],
                          capsys, monkeypatch)  # fmt: skip
    assert str(missing) in line and "no such checkpoint" in line and "unrecognized" not in line


def test_a_nonsense_device_is_not_called_an_unreadable_checkpoint(runs, capsys, monkeypatch):  # noqa: F811
    for command in (["generate"], ["perplexity"], ["sample-stats"], ["serve"]):
        line = one_line_error([*command, "--checkpoint", runs["music"], "--device", "banana"], capsys, monkeypatch)
        assert "--device banana" in line and "checkpoint" not in line
    if not torch.cuda.is_available():
        line = one_line_error(["generate", "--checkpoint", runs["music"], "--device", "cuda"], capsys, monkeypatch)
        assert "--device cuda" in line and "no CUDA device" in line


def test_a_broken_tokenizer_is_named_by_the_users_file_not_a_scratch_file(runs, tmp_path, capsys, monkeypatch):  # noqa: F811
    for kind in ("music", "text"):
        checkpoint = torch.load(runs[kind], weights_only=True)
        entry = checkpoint["multimodal"]
        broken = entry["tokenizer"].replace('"type": "', '"type": "X', 1)  # a class or part it does not know
        assert broken != entry["tokenizer"]
        entry["tokenizer"] = broken
        planted = tmp_path / f"{kind}.ckpt"
        torch.save(checkpoint, planted)
        line = one_line_error(["generate", "--checkpoint", planted], capsys, monkeypatch)
        assert str(planted) in line and "tokenizer does not load" in line and "tokenizer.json" not in line


def test_data_midi_given_a_file_is_one_line_and_status_2(tmp_path, capsys, monkeypatch):
    file = tmp_path / "song.mid"
    file.write_bytes(b"MThd")
    line = one_line_error(["data", "midi", file], capsys, monkeypatch)
    assert str(file) in line and "not a folder" in line
    line = one_line_error(["data", "midi", tmp_path, "--workers", "0"], capsys, monkeypatch)
    assert "--workers" in line
