"""``multimodal serve`` under load: a bounded queue (every request answered or told the queue is full, none
lost or hung), uploads refused by size or content with a clear error while the server keeps serving, and
every setting checked in the page's function, whatever the API sends. Listed in docs/reliability.md."""

import math
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

import pytest
from checkpoints import one_step_checkpoint

from tasks.checkpoint import load_task

gradio = pytest.importorskip("gradio")
MUSIC = ["music_continuation.yaml", "music_continuation_tiny.yaml"]
REQUESTS, QUEUE_SIZE = 20, 4  # more requests at once than the queue holds: some must be told it is full
PEAK_RSS_MIB, LOAD_RSS_MIB = 2048, 512  # the server's high-water mark, and its rise under the load (measured: ~950, ~90)


@pytest.fixture(scope="module")
def music(tmp_path_factory):
    """A one-step music checkpoint and the name of one of its held-out pieces."""
    from tasks.checkpoint import data_settings
    from tasks.commands.music import run_pieces

    checkpoint = one_step_checkpoint(MUSIC, tmp_path_factory.mktemp("serve_load") / "music.ckpt")
    return checkpoint, run_pieces(data_settings(checkpoint), "val").names[0]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _peak_rss_mib(pid: int) -> float:
    """The process's peak resident memory (Linux's VmHWM; psutil's current RSS elsewhere)."""
    status = Path(f"/proc/{pid}/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    psutil = pytest.importorskip("psutil")
    return psutil.Process(pid).memory_info().rss / 2**20


def _not_midi(folder: Path) -> dict[str, Path]:
    folder.mkdir(exist_ok=True)
    (folder / "notes.txt").write_text("not music\n")
    (folder / "photo.mid").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)  # an image named .mid
    return {"text": folder / "notes.txt", "renamed": folder / "photo.mid"}


def test_the_music_function_checks_every_setting_and_refuses_a_non_midi_upload(music, tmp_path, monkeypatch):
    """In-process and fast: what the slow test below sends through HTTP, given to the function directly."""
    from tasks.serve import music as music_page
    from tasks.serve.music import MusicSession

    checkpoint, piece = music
    task, tokenizer, data = load_task(checkpoint)
    session = MusicSession(task, tokenizer, data)
    good = {"piece": piece, "upload": None, "seconds": 2.0, "length": 16, "temperature": 1.0, "top_p": 0.95, "seed": 0}
    bad = {"seconds": [0.5, 31, math.nan, None], "length": [0, 15, 1025, 10**9, 16.5, "many"],
           "temperature": [0.0, 1.6, math.inf, math.nan], "top_p": [0.4, 1.01, math.nan, -1],
           "seed": [-1, 2**32, 0.5, math.nan, None], "guidance_scale": [-0.5, 5.5, math.nan]}  # fmt: skip
    for name, values in bad.items():
        for value in values:
            with pytest.raises(gradio.Error) as refused:
                session.continue_primer(**{**good, name: value})
            assert "\n" not in refused.value.message and ("outside" in refused.value.message
                                                          or "expected" in refused.value.message), (name, value)  # fmt: skip
    if not tokenizer.config.controls:  # guidance needs controls to follow: one line, not a traceback
        with pytest.raises(gradio.Error, match="no controls to follow"):
            session.continue_primer(**{**good, "guidance_scale": 2.0})
    for path in _not_midi(tmp_path).values():
        with pytest.raises(gradio.Error) as refused:
            session.continue_primer(**{**good, "upload": str(path)})
        assert refused.value.message.startswith(f"Could not read the upload: {path.name}: not a readable MIDI file")
        assert "\n" not in refused.value.message and str(path.parent) not in refused.value.message
    monkeypatch.setattr(music_page, "KEEP", 2)
    for _ in range(3):  # and the session still works, keeping only its last KEEP results on disk
        wav, _, midi, message = session.continue_primer(**good)
        assert Path(wav).is_file() and Path(midi).is_file() and "16 new events" in message
    assert sorted(path.name for path in session.folder.iterdir()) == ["request_2", "request_3"]


def test_serve_binds_the_loopback_address_with_a_bounded_queue_and_upload_size(music, monkeypatch):
    from tasks.cli import main
    from tasks.serve.checks import CONCURRENCY, MAX_UPLOAD, QUEUE_SIZE

    launched = {}
    monkeypatch.delenv("GRADIO_ANALYTICS_ENABLED", raising=False)  # restored afterwards
    monkeypatch.setattr(gradio.Blocks, "launch", lambda page, **settings: launched.update(page=page, **settings))
    main(["serve", "--checkpoint", str(music[0])])
    page = launched["page"]
    assert launched["server_name"] == "127.0.0.1" and launched["max_file_size"] == MAX_UPLOAD
    assert os.environ["GRADIO_ANALYTICS_ENABLED"] == "False"  # the page calls nowhere but its own server
    assert page._queue.max_size == QUEUE_SIZE and page._queue.default_concurrency_limit == CONCURRENCY in (1, 2)
    assert page.delete_cache == (3600, 3600)  # Gradio's copies of uploads and results do not pile up


@pytest.mark.slow
def test_twenty_requests_at_once_then_a_huge_and_a_non_midi_upload(music, tmp_path):
    """One ``multimodal serve`` process on a free loopback port: 20 requests at once are each answered or told
    the queue is full; a 50 MB upload is refused with 413 and a non-MIDI one with a one-line error; the
    server still answers afterwards, and its peak memory stays under a bound."""
    import httpx
    from gradio_client import Client, handle_file
    from gradio_client.exceptions import AppError
    from gradio_client.utils import QueueError

    checkpoint, piece = music
    port, url = _free_port(), None
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "NO_PROXY": "127.0.0.1,localhost",
           "no_proxy": "127.0.0.1,localhost"}  # fmt: skip
    command = [str(Path(sys.executable).with_name("multimodal")), "serve", "--checkpoint", str(checkpoint),
               "--port", str(port), "--device", "cpu", "--queue-size", str(QUEUE_SIZE)]  # fmt: skip
    log = (tmp_path / "serve.log").open("w+")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while url is None:  # up once the page answers; a server that died or never answers fails here
            assert server.poll() is None and time.monotonic() < deadline, Path(log.name).read_text()[-3000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/", timeout=2).status_code == 200:
                    url = f"http://127.0.0.1:{port}/"
            except httpx.TransportError:
                time.sleep(0.25)
        client = Client(url, verbose=False)
        settings = (piece, None, 2.0, 16, 1.0, 0.95)
        idle = _peak_rss_mib(server.pid)

        started = time.monotonic()
        jobs = [client.submit(*settings, seed, api_name="/continue") for seed in range(REQUESTS)]
        answered, full = 0, 0
        for job in jobs:
            try:
                wav, *_, message = job.result(timeout=120)  # none hung
                assert Path(wav).is_file() and "16 new events" in message
                answered += 1
            except QueueError as error:
                assert "Queue is full" in str(error) and "try again" in str(error)
                full += 1
            except FutureTimeout:
                pytest.fail("a request neither answered nor refused within 120 s")
        seconds = time.monotonic() - started
        assert answered + full == REQUESTS and answered >= 1 and full >= 1, (answered, full)

        large = tmp_path / "large.mid"
        with large.open("wb") as file:
            file.truncate(50 * 2**20)
        with large.open("rb") as file:  # straight to the server: the client checks the size too, a script need not
            refused = httpx.post(client.upload_url, files=[("files", ("large.mid", file))], timeout=60)
        assert refused.status_code == 413 and "maximum allowed size" in refused.text
        not_midi = _not_midi(tmp_path / "uploads")
        with pytest.raises(AppError, match="Invalid file type"):
            client.predict(*settings[:1], handle_file(str(not_midi["text"])), *settings[2:], 0, api_name="/continue")
        with pytest.raises(AppError, match="Could not read the upload: photo.mid: not a readable MIDI file"):
            client.predict(*settings[:1], handle_file(str(not_midi["renamed"])), *settings[2:], 0, api_name="/continue")
        with pytest.raises(AppError, match="1000000"):  # past the slider's bounds, through the API
            client.predict(*settings[:3], 10**6, *settings[4:], 0, api_name="/continue")

        wav, *_, message = client.predict(*settings, 7, api_name="/continue")  # still serving
        assert Path(wav).is_file() and piece in message
        peak = _peak_rss_mib(server.pid)
        print(f"\n{REQUESTS} requests in {seconds:.1f} s: {answered} answered, {full} told the queue is full; "
              f"peak RSS {idle:.0f} MiB once up, {peak:.0f} MiB at the end")  # fmt: skip
        assert server.poll() is None and peak < PEAK_RSS_MIB and peak - idle < LOAD_RSS_MIB
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
