"""The page `veloxquant serve` answers at /, in headless Chromium (Debian's chromium and
chromium-driver, driven by Selenium from tests/python/requirements.txt).

A conversation on the page: the reply streams into the log and equals the server's own greedy
answer to the same request, and the KV figure of the reply (bytes resident against the native
f16 cache, from the last streamed chunk) and the slot table (polled from /metrics) appear.

    .venv-test/bin/python tests/python/web_page_test.py BUILD_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import unittest
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(ROOT, "build")
BINARY = os.path.join(BUILD, "veloxquant")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium fetch a driver or a browser

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


class WebPage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = subprocess.Popen([BINARY, "serve", "-m", MODEL, "--port", "0", "--prompt-cache-entries", "0"],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = cls.server.stdout.readline()
        if not line.startswith("VELOXQUANT_READY "):
            cls.server.kill()
            raise AssertionError(f"no ready line: {line!r}")
        cls.base = f"http://127.0.0.1:{json.loads(line.split(' ', 1)[1])['port']}"
        options = webdriver.ChromeOptions()
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
            options.add_argument(arg)
        cls.browser = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)

    @classmethod
    def tearDownClass(cls):
        cls.browser.quit()
        cls.server.terminate()
        cls.server.wait(timeout=30)
        cls.server.stdout.close()

    def test_reply_renders_and_kv_figures_update(self):
        prompt = "What is the capital of France?"
        request = {"messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": 24,
                   "veloxquant": {"preset": "q4"}}
        with urllib.request.urlopen(urllib.request.Request(
                self.base + "/v1/chat/completions", data=json.dumps(request).encode(),
                headers={"Content-Type": "application/json"}), timeout=300) as r:
            expected = json.loads(r.read())["choices"][0]["message"]["content"]

        b = self.browser
        b.get(self.base + "/")
        self.assertEqual(b.title, "veloxquant serve")
        b.find_element(By.CSS_SELECTOR, "#cache option[value='{\"preset\":\"q4\"}']").click()
        max_tokens = b.find_element(By.ID, "max_tokens")
        max_tokens.clear()
        max_tokens.send_keys("24")
        b.find_element(By.ID, "prompt").send_keys(prompt)
        b.find_element(By.ID, "send").click()
        wait = WebDriverWait(b, 300)
        reply = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, ".turn.assistant[data-done='1']"))
        self.assertEqual(reply.text, expected)
        self.assertEqual(b.find_element(By.CSS_SELECTOR, ".turn.user").text, prompt)
        # The reply's KV figure, from the last streamed chunk: the preset's bytes against the
        # native f16 cache.
        last_kv = wait.until(lambda d: d.find_element(By.ID, "last_kv").text.startswith("preset q4")
                             and d.find_element(By.ID, "last_kv").text)
        self.assertIn("for the native f16 cache", last_kv)
        self.assertIn("MiB", last_kv)
        # The slot table, polled from /metrics, lists slot 0 with the cache it last used.
        wait.until(lambda d: "preset q4" in d.find_element(By.CSS_SELECTOR, "#slots tbody").text)
        wait.until(lambda d: d.find_element(By.ID, "kv_total").text not in ("", "-"))


if __name__ == "__main__":
    if not os.path.exists(MODEL):
        print(f"SKIP: {MODEL} is not here (scripts/fetch_models.sh)")
        sys.exit(77)
    unittest.main(verbosity=2)
