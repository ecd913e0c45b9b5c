"""The music page in a real headless browser: press Generate, an audio player appears; fill a gap in bars of an
uploaded file with the shipped model (slow; ``make browser``).

Needs Debian's ``chromium`` and ``chromium-driver`` and the ``.[browser]`` extra (Selenium); skipped
without them. Saves screenshots of the pages, after they answered, to ``$MULTIMODAL_SCREENSHOTS``
when that is set: the continuation of ``$MULTIMODAL_SERVE_CHECKPOINT`` (a music checkpoint or folder) instead of a
one-step model when that is set (how ``docs/images/serve_music.png`` is made from the demo's model).
"""

import os
import shutil
import socket
from pathlib import Path

import pytest
from checkpoints import one_step_checkpoint

pytestmark = pytest.mark.slow


def _driver():
    webdriver = pytest.importorskip("selenium.webdriver")
    pytest.importorskip("gradio")
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if browser is None or driver_path is None:
        pytest.skip("chromium and chromium-driver are not installed (make browser)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(driver_path), options=options)


def open_page(driver, checkpoint: Path):
    """Serves the page of ``checkpoint`` (a checkpoint or model folder) on a free local port and opens it in the
    browser; returns the page (``page.close()`` stops it)."""
    from tasks.checkpoint import load_task
    from tasks.serve import build_page

    task, tokenizer, data = load_task(checkpoint)
    page = build_page(task, tokenizer, data, checkpoint)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    page.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    driver.get(f"http://127.0.0.1:{port}/")
    return page


def save_page(driver, path: Path) -> None:
    """A screenshot of the whole page from its top (the answer at the top right), however long the form."""
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1400, max(1000, min(int(height) + 100, 2400)))
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(path))


def test_the_music_page_plays_a_continuation_in_a_browser(tmp_path):
    driver = _driver()  # skips without the browser or Selenium
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    from tasks.runs import resolve_checkpoint

    chosen = os.environ.get("MULTIMODAL_SERVE_CHECKPOINT")
    checkpoint = resolve_checkpoint(chosen) if chosen else one_step_checkpoint(["music_continuation.yaml", "music_continuation_tiny.yaml"], tmp_path / "music.ckpt")
    page = open_page(driver, checkpoint)
    try:
        wait = WebDriverWait(driver, 120)
        button = wait.until(expected_conditions.element_to_be_clickable((By.XPATH, "//button[normalize-space()='Generate']")))

        def loaded_seconds(d):  # the player's duration, which the browser shows once it decoded the WAV
            shown = [t.text for t in d.find_elements(By.CSS_SELECTOR, "[data-testid='waveform-listen'] time#duration")]
            seconds = [int(m) * 60 + int(s) for m, s in (text.split(":") for text in shown if ":" in text)]
            return max(seconds, default=0)

        assert loaded_seconds(driver) == 0  # nothing to hear before the click
        button.click()
        seconds = wait.until(loaded_seconds)
        assert seconds > 6, f"the continuation lasts {seconds} s, no longer than its primer"
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "img[src*='.png']"))  # the piano roll
        if os.environ.get("MULTIMODAL_SCREENSHOTS"):
            save_page(driver, Path(os.environ["MULTIMODAL_SCREENSHOTS"]) / "serve_music.png")
    finally:
        driver.quit()
        page.close()


def test_the_shipped_models_page_fills_a_gap_in_bars_of_an_upload(tmp_path):
    """The page's "fill a gap" choice, the gap's ends and a part box, as a visitor sets them, on a chorale uploaded as
    sheet music; the answer names the span in seconds (bar2 to bar3 of a 3/4 chorale at 120 beats a minute after its
    one-beat upbeat, which the sheet marks and the empty pickup box keeps: 2-3.5 s) and the part written. The shipped
    model shows the controls' row too, whose every field the browser sends and Gradio checks against its bounds
    (an empty "notes per second" went as 0, under its minimum, and failed every request of this page)."""
    driver = _driver()
    from music21 import corpus
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from multimodal.pretrained import resolve_model

    chorale = tmp_path / "bwv269.musicxml"
    corpus.parse("bach/bwv269").write("musicxml", fp=chorale)  # 3/4 at 120 (music21's default tempo), an upbeat
    page = open_page(driver, resolve_model("music"))
    try:
        wait = WebDriverWait(driver, 120)
        wait.until(lambda d: d.find_elements(By.XPATH, "//button[normalize-space()='Generate']"))
        driver.find_element(By.CSS_SELECTOR, "input[type='file']").send_keys(str(chorale))
        wait.until(lambda d: d.find_elements(By.XPATH, "//td[@aria-label='bwv269.musicxml']"))  # uploaded
        driver.find_element(By.XPATH, "//label[.//span[normalize-space()='fill a gap in the piece']]").click()
        for label, text in (("gap from", "bar2"), ("gap to", "bar3")):
            box = driver.find_element(By.XPATH, f"//label[.//span[starts-with(normalize-space(), '{label}')]]//textarea")
            box.send_keys(text)
        driver.find_element(By.XPATH, "//label[.//span[normalize-space()='Part 3']]").click()
        driver.find_element(By.XPATH, "//button[normalize-space()='Generate']").click()
        answer = "bwv269.musicxml: 2-3.5 s of Part 3 written anew; everything else kept."
        wait.until(lambda d: d.find_elements(By.XPATH, f"//*[normalize-space()='{answer}']"))
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "img[src*='.png']"))  # the piano roll
        if os.environ.get("MULTIMODAL_SCREENSHOTS"):
            save_page(driver, Path(os.environ["MULTIMODAL_SCREENSHOTS"]) / "serve_music_infill.png")
    finally:
        driver.quit()
        page.close()
