#!/usr/bin/env python3
"""The chat page (GET /) in headless Chromium, driven by Selenium.

Serves stories260K and checks, in a real browser:
  - a typed message streams a reply into the page: the reply grows over several renders, equals
    (word for word) what POST /v1/chat/completions returns for the same system prompt, message
    and sampling settings (temperature 0), and tokens/s is shown;
  - Stop ends a reply mid-stream: the network is throttled so the stream takes many seconds, Stop
    is pressed once the first words show, the reply stays a proper prefix of the full one and
    the page is ready for the next message at once;
  - an error from the server is shown: max tokens beyond the context gets the server's 400 text,
    and the failed message goes back to the input box;
  - the Markdown renderer escapes HTML (a <script> in a reply stays text) and renders code,
    bold and lists.
A screenshot of the finished chat is saved as chat_page.png in --screenshot-dir.

    python3 chat_page_test.py --llmc build/bin/llmc --llmrt build/bin/llmrt \
        --model-dir tests/data/stories260K --screenshot-dir build/tests/gateway

Skips (exit 77, saying why) when Selenium, chromium or chromedriver is missing.
"""
import os
import shutil
import tempfile
import time

import gateway_harness

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:
    gateway_harness.skip("chat_page_test", "the selenium Python package is not importable")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    gateway_harness.skip("chat_page_test", "chromium or chromedriver is not on PATH")

SYSTEM = "You tell short stories."
MESSAGE = "Tell me about a dog."


def browser(work):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1100,800", "--user-data-dir=" + os.path.join(work, "chrome")):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def words(text):
    return text.split()


def main():
    args = gateway_harness.arguments("--screenshot-dir")
    work = tempfile.mkdtemp(prefix="llmrt-chat-page-")
    server, driver = None, None
    try:
        plan = gateway_harness.stories_plan(args.llmc, args.model_dir, work)
        server = gateway_harness.Server(args.llmrt, plan, work)
        status, reference = gateway_harness.http(
            "POST", server.url + "/v1/chat/completions",
            {"messages": [{"role": "system", "content": SYSTEM},
                          {"role": "user", "content": MESSAGE}],
             "temperature": 0, "top_p": 1, "max_tokens": 60})
        assert status == 200, reference
        expected = reference["choices"][0]["message"]["content"]

        # / takes GET only; the page is HTML with its script inline (no other file is served).
        status, error = gateway_harness.http("POST", server.url + "/", {})
        assert status == 405 and "use GET" in error["error"]["message"], (status, error)
        driver = browser(work)
        wait = WebDriverWait(driver, 30)
        driver.get(server.url + "/")
        assert driver.title == "llmrt chat", driver.title
        wait.until(lambda d: d.find_element(By.ID, "model").text == "stories")

        def field(element_id, value):
            element = driver.find_element(By.ID, element_id)
            element.clear()
            element.send_keys(value)

        field("system", SYSTEM)
        field("temperature", "0")
        field("max-tokens", "60")
        # Every render of the reply is recorded, to see that it arrives in pieces: the page's
        # renderMarkdown is a global the stream loop looks up on each chunk, so a wrapper sees
        # each text the page showed.
        driver.execute_script("""
            window.renders = [];
            const render = window.renderMarkdown;
            window.renderMarkdown = (text) => { window.renders.push(text); return render(text); };""")
        field("input", MESSAGE)
        driver.find_element(By.ID, "send").click()
        wait.until(lambda d: "tokens/s" in d.find_element(By.ID, "stats").text and
                   d.find_element(By.ID, "send").is_enabled())
        replies = driver.find_elements(By.CSS_SELECTOR, ".message.assistant")
        assert len(replies) == 1
        assert words(replies[0].text) == words(expected), (replies[0].text, expected)
        renders = [r for r in driver.execute_script("return window.renders;") if r]
        assert len(set(renders)) >= 5, "the reply did not stream: %d renders" % len(set(renders))
        stats = driver.find_element(By.ID, "stats").text
        assert stats.startswith("60 tokens,") and stats.endswith("length"), stats
        assert driver.find_element(By.ID, "error").text == ""

        # Stop mid-stream: at 2 KB/s the ~60 chunks of a reply (~200 bytes each) take seconds.
        driver.set_network_conditions(offline=False, latency=5, download_throughput=2000,
                                      upload_throughput=100000)
        field("input", "And a cat?")
        driver.find_element(By.ID, "send").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".message.assistant")) == 2 and
                   len(words(d.find_elements(By.CSS_SELECTOR, ".message.assistant")[1].text)) >= 2)
        assert driver.find_element(By.ID, "stop").is_enabled()
        driver.find_element(By.ID, "stop").click()
        wait.until(lambda d: d.find_element(By.ID, "send").is_enabled())
        stopped = driver.find_elements(By.CSS_SELECTOR, ".message.assistant")[1].text
        time.sleep(1)  # nothing more may arrive after Stop
        assert driver.find_elements(By.CSS_SELECTOR, ".message.assistant")[1].text == stopped
        assert "(stopped)" in driver.find_element(By.ID, "stats").text
        assert not driver.find_element(By.ID, "stop").is_enabled()
        status, full = gateway_harness.http(
            "POST", server.url + "/v1/chat/completions",
            {"messages": [{"role": "system", "content": SYSTEM},
                          {"role": "user", "content": MESSAGE},
                          {"role": "assistant", "content": expected},
                          {"role": "user", "content": "And a cat?"}],
             "temperature": 0, "top_p": 1, "max_tokens": 60})
        full_words = words(full["choices"][0]["message"]["content"])
        stopped_words = words(stopped)
        assert 2 <= len(stopped_words) < len(full_words), (stopped, full_words)
        assert stopped_words[:-1] == full_words[:len(stopped_words) - 1], (stopped, full_words)
        driver.delete_network_conditions()

        # A server error is shown: the context is 512 tokens.
        field("max-tokens", "100000")
        field("input", "Too long")
        driver.find_element(By.ID, "send").click()
        wait.until(lambda d: d.find_element(By.ID, "error").text != "")
        error = driver.find_element(By.ID, "error").text
        assert "maximum context length is 512 tokens" in error, error
        # The failed turn is taken back: no empty reply, the message is back in the input box.
        assert len(driver.find_elements(By.CSS_SELECTOR, ".message.assistant")) == 2
        assert len(driver.find_elements(By.CSS_SELECTOR, ".message.user")) == 2
        assert driver.find_element(By.ID, "input").get_attribute("value") == "Too long"

        # The renderer: HTML in a reply is text, never markup; code, bold and lists render.
        html = driver.execute_script(
            "return renderMarkdown(arguments[0]);",
            "**bold** <script>alert(1)</script> [x](javascript:alert(1))\n- one\n- two\n"
            "```js\nif (a < b) {}\n```")
        assert "<script>" not in html and "&lt;script&gt;" in html, html
        assert "<strong>bold</strong>" in html and "<li>one</li><li>two</li>" in html, html
        assert "<pre><code>if (a &lt; b) {}\n</code></pre>" in html, html
        assert "href" not in html, html

        os.makedirs(args.screenshot_dir, exist_ok=True)
        screenshot = os.path.join(args.screenshot_dir, "chat_page.png")
        assert driver.save_screenshot(screenshot), screenshot
        print("chat_page_test: screenshot saved to %s" % screenshot)
        print("chat_page_test: OK")
    finally:
        if driver is not None:
            driver.quit()
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
