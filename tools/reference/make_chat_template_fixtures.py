#!/usr/bin/env python3
"""Reference renders of real chat templates for tests/lm/tokenizer/chat_template_test.cpp.

Each template under tests/fixtures/tokenizer/chat_templates/ (their origins are listed in
TEMPLATES below and in that folder's SOURCES.md; SmolLM2's is read from the GGUF file itself)
is rendered over a set of conversations, with and without the generation prompt, by
transformers' own `render_jinja_template` - the function `tokenizer.apply_chat_template` calls,
with Jinja2 configured exactly as transformers configures it (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loop controls, its tojson/raise_exception/strftime_now/namespace).
strftime_now reads a fixed clock (FIXED_NOW, local time) so that the renders are reproducible.

Writes tests/fixtures/tokenizer/chat_templates.json: for every case the template name, the
messages, add_generation_prompt and either the expected text, or the message the template
raised with raise_exception, or the Jinja2 error another failure gave.

Usage: /work/venv-hf/bin/python tools/reference/make_chat_template_fixtures.py
Needs: tools/reference/requirements.txt (transformers, jinja2, gguf); scripts/fetch_models.sh
for models/SmolLM2-135M-Instruct.Q4_1.gguf.
"""
import datetime as real_datetime
import json
import pathlib

import gguf
import jinja2
import transformers
from transformers.utils import chat_template_utils

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
OUT = ROOT / "tests/fixtures/tokenizer"
TEMPLATE_DIR = OUT / "chat_templates"
SMOLLM2_GGUF = ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"
FIXED_NOW = real_datetime.datetime(2026, 1, 15, 12, 0, 0)

LLAMA_CPP = "ggml-org/llama.cpp (mirror ye-NX/llama.cpp @ 1eeb523c3e0c7ffbd59469f5463dcbdecba3535e)"
# name: (where the text comes from, BOS text, EOS text as the model's tokenizer has them)
TEMPLATES = {
    "smollm2": ("tokenizer.chat_template of models/SmolLM2-135M-Instruct.Q4_1.gguf", "<|im_start|>", "<|im_end|>"),
    "plain_chatml": ("plain ChatML (teknium/OpenHermes-2.5-Mistral-7B), written here", "<s>", "<|im_end|>"),
    "gemma3": ("google/gemma-3-*-it: _CHAT_TEMPLATE of huggingface/transformers "
               "src/transformers/models/gemma3/convert_gemma3_weights.py @ c1a83acdb3fd77f2e897215d94a5ceaf05c885f1 "
               "(the template the converter writes into tokenizer_config.json)", "<bos>", "<eos>"),
    "gemma2": (f"google/gemma-2-2b-it: {LLAMA_CPP} models/templates/google-gemma-2-2b-it.jinja", "<bos>", "<eos>"),
    "gemma_7b": (f"google/gemma-7b-it: {LLAMA_CPP} tests/test-chat-template.cpp", "<bos>", "<eos>"),
    "llama3": (f"meta-llama/Meta-Llama-3-8B-Instruct (first release): {LLAMA_CPP} tests/test-chat-template.cpp",
               "<|begin_of_text|>", "<|eot_id|>"),
    "llama3_1": (f"meta-llama/Llama-3.1-8B-Instruct: {LLAMA_CPP} models/templates/meta-llama-Llama-3.1-8B-Instruct.jinja",
                 "<|begin_of_text|>", "<|eot_id|>"),
    "llama3_2": (f"meta-llama/Llama-3.2-3B-Instruct: {LLAMA_CPP} models/templates/meta-llama-Llama-3.2-3B-Instruct.jinja",
                 "<|begin_of_text|>", "<|eot_id|>"),
    "mistral_v0_2": (f"mistralai/Mistral-7B-Instruct-v0.2 (old, no system prompt): {LLAMA_CPP} tests/test-chat-template.cpp",
                     "<s>", "</s>"),
    "mistral_v1": (f"mistralai/Mistral-7B-Instruct-v0.2 ('v1' with a system prompt): {LLAMA_CPP} "
                   "tests/test-chat-template.cpp", "<s>", "</s>"),
    "mistral_nemo": (f"mistralai/Mistral-Nemo-Instruct-2407: {LLAMA_CPP} "
                     "models/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>"),
    "phi3_mini": (f"microsoft/Phi-3-mini: {LLAMA_CPP} tests/test-chat-template.cpp", "<s>", "<|endoftext|>"),
    "phi3_5": (f"microsoft/Phi-3.5-mini-instruct: {LLAMA_CPP} models/templates/microsoft-Phi-3.5-mini-instruct.jinja",
               "<s>", "<|endoftext|>"),
    "phi4": (f"microsoft/phi-4: {LLAMA_CPP} tests/test-chat-template.cpp", "<|endoftext|>", "<|im_end|>"),
    "qwen2_5": (f"Qwen/Qwen2.5-7B-Instruct: {LLAMA_CPP} models/templates/Qwen-Qwen2.5-7B-Instruct.jinja",
                "<|endoftext|>", "<|im_end|>"),
    "qwen3": (f"Qwen/Qwen3-0.6B: {LLAMA_CPP} models/templates/Qwen-Qwen3-0.6B.jinja", "<|endoftext|>", "<|im_end|>"),
    "zephyr": ("HuggingFaceH4/zephyr-7b-beta: huggingface/huggingface.js packages/jinja/test/templates.test.js "
               "@ 2353d0f46a55745fa7f89824909a847dc6eb4816", "<s>", "</s>"),
    "deepseek_r1_distill_qwen": (f"deepseek-ai/DeepSeek-R1-Distill-Qwen-32B: {LLAMA_CPP} "
                                 "models/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
                                 "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek_v2": (f"deepseek-ai/DeepSeek-V2: {LLAMA_CPP} tests/test-chat-template.cpp",
                    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "granite3_3": (f"ibm-granite/granite-3.3-2b-instruct: {LLAMA_CPP} "
                   "models/templates/ibm-granite-granite-3.3-2B-Instruct.jinja", "<|end_of_text|>", "<|end_of_text|>"),
}

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi!"}],
    [{"role": "user", "content": "Tell me a joke."},
     {"role": "assistant", "content": "Why did the chicken cross the road?"},
     {"role": "user", "content": "Why?\nMulti-line\n  content."}],
    [{"role": "system", "content": "  Answer in French.\n"},
     {"role": "user", "content": "Bonjour — ça va ? 世界 🌍"},
     {"role": "assistant", "content": "   Très bien, merci.   "},
     {"role": "user", "content": "Quote: 'single' \"double\" \\backslash {{ not code }} {% raw %}"},
     {"role": "assistant", "content": "<think>\nreasoning\n</think>\n\nThe answer."}],
    # Two user turns in a row: the templates that insist on alternation raise.
    [{"role": "user", "content": "First."}, {"role": "user", "content": "Second."}],
    # A system message alone.
    [{"role": "system", "content": "Only a system message."}],
    # Nothing: templates that read messages[0] fail on an undefined value.
    [],
]


class FixedDatetime(real_datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


def template_text(name):
    if name == "smollm2":
        text = gguf.GGUFReader(str(SMOLLM2_GGUF)).fields["tokenizer.chat_template"].contents()
        (TEMPLATE_DIR / "smollm2.jinja").write_text(text, encoding="utf-8", newline="")
        return text
    if name == "plain_chatml":
        text = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                "{% endif %}")
        (TEMPLATE_DIR / "plain_chatml.jinja").write_text(text, encoding="utf-8", newline="")
        return text
    return (TEMPLATE_DIR / f"{name}.jinja").read_text(encoding="utf-8")


def render(text, messages, add_generation_prompt, bos, eos):
    try:
        out = chat_template_utils.render_jinja_template(
            conversations=[messages], chat_template=text, add_generation_prompt=add_generation_prompt,
            bos_token=bos, eos_token=eos)
        # Older/newer transformers return (rendered, generation_indices); keep the text.
        rendered = out[0] if isinstance(out, tuple) else out
        return {"expected": rendered[0] if isinstance(rendered, list) else rendered}
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:  # raise_exception(message)
            return {"raises": e.message}
        return {"error": f"{type(e).__name__}: {e}"}
    except (TypeError, ValueError, IndexError, KeyError, AttributeError) as e:
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    chat_template_utils.datetime = FixedDatetime  # strftime_now reads datetime.now()
    cases = []
    templates = {}
    for name, (origin, bos, eos) in TEMPLATES.items():
        text = template_text(name)
        templates[name] = {"origin": origin, "file": f"chat_templates/{name}.jinja", "bos_token": bos, "eos_token": eos}
        for messages in CONVERSATIONS:
            for add_generation_prompt in (True, False):
                case = {"template": name, "messages": messages, "add_generation_prompt": add_generation_prompt}
                case.update(render(text, messages, add_generation_prompt, bos, eos))
                cases.append(case)
    result = {
        "source": "transformers.utils.chat_template_utils.render_jinja_template (what apply_chat_template runs)",
        "versions": {"transformers": transformers.__version__, "jinja2": jinja2.__version__},
        "now": FIXED_NOW.isoformat() + " local time (strftime_now)",
        "templates": templates,
        "cases": cases,
    }
    (OUT / "chat_templates.json").write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    kinds = {k: sum(1 for c in cases if k in c) for k in ("expected", "raises", "error")}
    print(f"{len(cases)} cases over {len(templates)} templates: {kinds}")


if __name__ == "__main__":
    main()
