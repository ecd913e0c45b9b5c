"""The music page in a real headless browser: press Continue, an audio player appears (slow; ``make browser``).

Needs Debian's ``chromium`` and ``chromium-driver`` and the ``.[browser]`` extra (Selenium); skipped
without them. Saves a screenshot of the page, after the continuation, to ``$MULTIMODAL_SCREENSHOTS``
when that is set, of ``$MULTIMODAL_SERVE_CHECKPOINT`` (a music checkpoint or folder) instead of a
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


def test_the_music_page_plays_a_continuation_in_a_browser(tmp_path):
    driver = _driver()  # skips without the browser or Selenium
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    from tasks.checkpoint import load_task
    from tasks.runs import resolve_checkpoint
    from tasks.serve import build_page

    chosen = os.environ.get("MULTIMODAL_SERVE_CHECKPOINT")
    checkpoint = resolve_checkpoint(chosen) if chosen else one_step_checkpoint(["music_continuation.yaml", "music_continuation_tiny.yaml"], tmp_path / "music.ckpt")
    task, tokenizer, data = load_task(checkpoint)
    page = build_page(task, tokenizer, data, checkpoint)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    page.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        driver.get(f"http://127.0.0.1:{port}/")
        wait = WebDriverWait(driver, 120)
        button = wait.until(expected_conditions.element_to_be_clickable((By.XPATH, "//button[normalize-space()='Continue']")))

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
            driver.save_screenshot(str(Path(os.environ["MULTIMODAL_SCREENSHOTS"]) / "serve_music.png"))
    finally:
        driver.quit()
        page.close()
