"""`veloxquant serve` driven by the official `openai` Python client.

Starts the server on a free loopback port (--port 0, port read from the VELOXQUANT_READY line)
and checks models, chat and completions, streamed and not, against `veloxquant generate` with
the same cache under greedy decoding; a bad per-request cache is a BadRequestError naming it.

    .venv-test/bin/python tests/python/openai_client_test.py BUILD_DIR
"""
import json
import os
import subprocess
import sys
import unittest

import openai

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(ROOT, "build")
BINARY = os.path.join(BUILD, "veloxquant")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPT = "What is the capital of France? Answer in one sentence."


def generate(*args):
    out = subprocess.run([BINARY, "generate", "-m", MODEL, *args], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise AssertionError(f"generate failed: {out.stderr}")
    return out.stdout[:-1] if out.stdout.endswith("\n") else out.stdout


class OpenAIClient(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = subprocess.Popen(
            [BINARY, "serve", "-m", MODEL, "--preset", "q4", "--port", "0", "--prompt-cache-entries", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = cls.server.stdout.readline()
        if not line.startswith("VELOXQUANT_READY "):
            cls.server.kill()
            raise AssertionError(f"no ready line: {line!r} {cls.server.stderr.read()}")
        cls.ready = json.loads(line[len("VELOXQUANT_READY "):])
        cls.client = openai.OpenAI(base_url=f"http://127.0.0.1:{cls.ready['port']}/v1", api_key="unused",
                                   max_retries=0, timeout=300)

    @classmethod
    def tearDownClass(cls):
        cls.server.terminate()
        cls.server.wait(timeout=30)
        cls.server.stdout.close()
        cls.server.stderr.close()

    def test_models(self):
        models = self.client.models.list()
        self.assertEqual([m.id for m in models.data], ["SmolLM2-135M-Instruct.Q4_1"])

    def test_chat_equals_generate(self):
        expected = generate("--chat", "-p", PROMPT, "-n", "24", "--preset", "q4")
        self.assertIn("Paris", expected)
        reply = self.client.chat.completions.create(
            model=self.ready["model"], messages=[{"role": "user", "content": PROMPT}], temperature=0, max_tokens=24)
        self.assertEqual(reply.choices[0].message.content, expected)
        self.assertEqual(reply.choices[0].message.role, "assistant")
        self.assertGreater(reply.usage.prompt_tokens, 0)

    def test_streamed_chat_equals_generate(self):
        expected = generate("--chat", "-p", PROMPT, "-n", "24", "--preset", "q4")
        stream = self.client.chat.completions.create(
            model=self.ready["model"], messages=[{"role": "user", "content": PROMPT}], temperature=0, max_tokens=24,
            stream=True, stream_options={"include_usage": True})
        pieces, finish, usage = [], None, None
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.delta.content:
                    pieces.append(choice.delta.content)
                if choice.finish_reason:
                    finish = choice.finish_reason
        self.assertGreater(len(pieces), 3)  # really streamed, piece by piece
        self.assertEqual("".join(pieces), expected)
        self.assertIn(finish, ("stop", "length"))
        self.assertIsNotNone(usage)
        self.assertEqual(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens)

    def test_completion_with_per_request_cache(self):
        expected = generate("-p", "The capital of France is", "-n", "12", "--method", "kivi", "--bits", "4")
        reply = self.client.completions.create(
            model=self.ready["model"], prompt="The capital of France is", temperature=0, max_tokens=12,
            extra_body={"veloxquant": {"method": "kivi", "bits": 4}})
        self.assertEqual(reply.choices[0].text, expected)
        streamed = "".join(c.choices[0].text for c in self.client.completions.create(
            model=self.ready["model"], prompt="The capital of France is", temperature=0, max_tokens=12, stream=True,
            extra_body={"veloxquant": {"method": "kivi", "bits": 4}}) if c.choices)
        self.assertEqual(streamed, expected)

    def test_bad_cache_is_a_bad_request(self):
        with self.assertRaises(openai.BadRequestError) as caught:
            self.client.chat.completions.create(
                model=self.ready["model"], messages=[{"role": "user", "content": "hi"}],
                extra_body={"veloxquant": {"method": "nope"}})
        self.assertIn("unknown method 'nope'", str(caught.exception))
        self.assertEqual(self.server.poll(), None)  # still serving


if __name__ == "__main__":
    if not os.path.exists(MODEL):
        print(f"SKIP: {MODEL} is not here (scripts/fetch_models.sh)")
        sys.exit(77)
    unittest.main(verbosity=2)
