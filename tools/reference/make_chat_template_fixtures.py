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

Also writes tests/fixtures/tokenizer/jinja_snippets.json (tests/lm/tokenizer/jinja_test.cpp):
short templates, one construct family each (whitespace control, operators, literals, loops
and scoping, namespace, filters, tests, str/dict methods), rendered in the same environment
with the variables in SNIPPET_VARIABLES, and some that must fail.

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


SNIPPET_VARIABLES = {
    "xs": [0, 1, 2, 3, 4, 5, 6],
    "s": "héllo wörld",
    "d": {"a": 1, "b": "two"},
    "users": [{"name": "bob", "role": "user", "admin": False}, {"name": "alice", "role": "admin", "admin": True},
              {"name": "carol", "role": "user"}],
    "obj": {"b": [1, 2.5, None, True, "x"], "a": {"n": {}}},
    "messages": [{"role": "user", "content": "hi"}],
    "x": 1,
}

SNIPPETS = [
    # whitespace control: trim_blocks, lstrip_blocks, - and + markers, comments, newlines
    "  {% if true %}\n  a\n  {% endif %}\n  b {# c #}\n  {#- d #}  e\n",
    "{% for i in [1,2] %}\n  {{ i }}\n{% endfor %}\n",
    "a  {%- if true -%}  b  {%- endif -%}  c",
    "a {{- ' x ' -}} b",
    "x\n  {%+ if true %}y{% endif +%}\nz",
    "{# comment #}\nA\n   {# indented comment #}\nB",
    "line1\r\nline2\r{{ 'x' }}\n",
    "{{ 'a' }}\n\n",
    "  {{ 'var not lstripped' }}\n  {% if true %}x{% endif %}",
    "{% set cap %}\n  captured {{ 1 + 1 }}\n{% endset %}[{{ cap }}]",
    "{%- for m in messages -%}\n    {{- m.role }}\n{%- endfor %}\n  tail",
    "{% if true %}  \t\n{% endif %}|\t{% if true %}x{% endif %}",
    # operators and literals
    "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1 / 3 }}",
    "{{ 0.1 + 0.2 }} {{ 1.5e3 }} {{ 1e100 }} {{ 3.0 }} {{ 2.5 * 2 }} {{ 1e-5 }} {{ 123456789012345678.0 }} {{ -0.5 }} {{ 1_000 }}",
    "{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ 2 * 'c' }} {{ 'x' + 'y' }} {{ \"dq\" 'sq' }} {{ [1] * 2 + [3] }}",
    "{{ 'tab\\there' }}|{{ 'nl\\nx' }}|{{ '\\u00e9\\x41\\101' }}|{{ 'keep \\d' }}|{{ \"it's\" }}|{{ 'q\\'s' }}",
    "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' < 'b' }} {{ [1,2] == [1,2] }} {{ (1,2) == [1,2] }} {{ {'a':1} == {'a':1} }} "
    "{{ 1 == 1.0 }} {{ true == 1 }} {{ none == none }} {{ 'a' != 'b' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 2.0 }}",
    "{{ 'a' in 'cat' }} {{ 2 in [1,2] }} {{ 'k' in {'k':1} }} {{ 3 not in [1,2] }} {{ not 1 in [1] }} {{ 'a' in ['a'] }}",
    "{{ 1 and 'x' }}|{{ 0 or 'y' }}|{{ none or [] }}|{{ '' and 1 }}|{{ not '' }}|{{ not not 3 }}",
    "{{ 'a' if true else 'b' }}|{{ 'a' if false }}|{{ 'x' if 0 else 'y' if 1 else 'z' }}",
    "{{ none }}|{{ true }}|{{ [1, 'a', none, true, 1.5] }}|{{ {'a': 1, 'b': [2]} }}|{{ (1,) }}|{{ (1, 2) }}|{{ () }}|"
    "{{ ['it\\'s', 'a\"b', 'c\\nd'] }}|{{ d }}|{{ -x }}|{{ +x }}",
    # subscripts and slices
    "{{ xs[0] }}{{ xs[-1] }}{{ xs[1:] }}{{ xs[:-1] }}{{ xs[::-1] }}{{ xs[::2] }}{{ xs[5:1:-2] }}{{ xs[-100:2] }}{{ xs[3:100] }}"
    "|{{ s[1:4] }}|{{ s[::-1] }}|{{ s[-2] }}|{{ s[1] }}|{{ xs.0 }}",
    "{{ d.a }}|{{ d['a'] }}|{{ d.missing }}|{{ d['missing'] is defined }}|{{ xs[10] is defined }}|{{ d.items() | list }}|"
    "{{ d.keys() | list }}|{{ d.values() | list }}|{{ d.get('a') }}|{{ d.get('zz', 'dflt') }}|{{ d.get('zz') }}|{{ none.x is defined }}",
    # loops and scopes
    "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/"
    "{{ loop.last }}/{{ loop.length }};{% endfor %}",
    "{% for x in xs if x is odd %}{{ x }}{{ ',' if not loop.last }}{% else %}none{% endfor %}|{% for x in [] %}a{% else %}empty{% endfor %}",
    "{% for x in xs %}{% if x == 4 %}{% break %}{% endif %}{% if x is even %}{% continue %}{% endif %}{{ x }}{% endfor %}",
    "{% for a in [1,2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }} {% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1,2],[3,4]] %}{{ a + b }}{% endfor %}"
    "{% for (a, b) in [(5, 6)] %}{{ a * b }}{% endfor %}",
    "{% for k in d %}{{ k }}{% endfor %}{% for c in 'hé' %}[{{ c }}]{% endfor %}",
    "{% set y = 5 %}{% for i in [1,2] %}[{{ y }}]{% set y = i %}{% endfor %}[{{ y }}]{% if true %}{% set y = 9 %}{% endif %}[{{ y }}]",
    "{% set ns = namespace(a=1, b=[]) %}{% for i in range(3) %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}"
    "{% set ns.c = 'new' %}{{ ns.c }}{{ ns.b }}{{ ns.zz is defined }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}",
    "{{ range(3) | list }}{{ range(1, 10, 3) | list }}{{ range(5, 0, -2) | list }}"
    "{% for i in range(xs|length - 1, -1, -1) %}{{ i }}{% endfor %}",
    "{% for x in xs[:4] %}{{ loop.cycle('a','b') }}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}",
    "{% set messages = messages + [{'role': 'assistant', 'content': 'yo'}] %}{% for m in messages %}{{ m.role }}:{{ m['content'] }} {% endfor %}",
    # filters
    "{{ '  a b  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'héllo' | length }}|{{ xs | length }}|{{ d | count }}|"
    "{{ 'MiXed' | upper }}{{ 'MiXed' | lower }}|{{ 'hello WORLD' | capitalize }}|{{ 'hello wORLD x1y' | title }}|{{ ' \u3000x\u00a0' | trim }}",
    "{{ obj | tojson }}|{{ obj | tojson(indent=2) }}|{{ obj | tojson(sort_keys=true) }}|{{ obj | tojson(separators=(',', ':')) }}|"
    "{{ 'é\"\\n<>&\\'\\x01' | tojson }}|{{ [] | tojson(indent=4) }}|{{ users[0] | tojson }}|{{ 1.0 | tojson }}",
    "{{ d | items | list }}|{{ u | default('dflt') }}|{{ '' | default('dflt') }}|{{ '' | default('dflt', true) }}|"
    "{{ none | default('x') }}|{{ xs | first }}|{{ xs | last }}|{{ 'abc' | first }}|{{ [] | first is defined }}|{{ u | d('D') }}",
    "{{ xs | join(', ') }}|{{ [1, none, 'a'] | join }}|{{ users | join('/', attribute='name') }}|{{ 'aaa' | replace('a', 'b', 2) }}|"
    "{{ 42 | string ~ '!' }}|{{ '42' | int + 1 }}|{{ ' 7 ' | int }}|{{ '3.9' | int }}|{{ 'x' | int }}|{{ 'x' | int(5) }}|"
    "{{ 3.7 | int }}|{{ '2.5' | float * 2 }}|{{ true | int }}|{{ xs | string }}",
    "{{ users | selectattr('role', 'equalto', 'user') | map(attribute='name') | list }}|{{ users | rejectattr('admin') | list | length }}|"
    "{{ users | selectattr('admin') | map(attribute='name') | join }}|{{ xs | select('odd') | list }}|"
    "{{ xs | reject('divisibleby', 3) | list }}|{{ ['a','b'] | map('upper') | list }}|{{ users | map(attribute='missing', default='?') | list }}|"
    "{{ users | selectattr('admin', 'defined') | list | length }}|{{ xs | select | list }}",
    "{{ xs | reverse | list }}|{{ 'abc' | reverse }}|{{ [3,1,2] | sort }}|{{ ['b','A','c'] | sort }}|{{ [3,1,2] | sort(reverse=true) }}|"
    "{{ users | sort(attribute='name') | map(attribute='name') | join(',') }}|{{ [1,2,1,3] | unique | list }}|{{ 'ab' | list }}|{{ -3 | abs }}",
    "{{ ('a' ~ 'b') | upper }}{{ not x is defined }}{{ -1 | abs }}{{ xs | length > 3 }}{{ 'a' ~ 'b' | upper }}",
    "{{ d | dictsort }}|{{ {'b': 1, 'A': 2, 'c': 0} | dictsort }}|{{ {'b': 1, 'A': 2, 'c': 0} | dictsort(by='value', reverse=true) }}|"
    "{{ {'b': 1, 'A': 2} | dictsort(true) }}|{% for k, v in d | dictsort %}{{ k }}{{ v }}{% endfor %}",
    "[{{ 'a\\nb\\n\\nc' | indent }}]|[{{ 'a\\nb\\n\\nc\\n' | indent(2, first=true) }}]|[{{ 'a\\n\\nb' | indent('> ', blank=true) }}]|"
    "[{{ obj | tojson(indent=2) | indent(4) }}]|[{{ '' | indent(first=true) }}]|[{{ 'x\\r\\ny\\u2028z' | indent(1) }}]",
    "{{ xs | sum }}|{{ [1.5, 2] | sum }}|{{ users | selectattr('admin', 'defined') | map(attribute='admin') | map('int') | sum }}|"
    "{{ [{'n': 2}, {'n': 3}] | sum(attribute='n', start=10) }}|{{ none | selectattr('x') | list }}|{{ none | map('upper') | list }}",
    "{% set t = {0: 'zero', 512: 'half', 'k': 'str'} %}{{ t[512] }}|{{ t[0] }}|{{ 512 in t }}|{{ '512' in t }}|{{ t | tojson }}|"
    "{{ t }}|{% for k in t %}{{ k + 1 if k is integer else k }},{% endfor %}|{{ t.get(0) }}|{{ t[1.0 - 1.0] }}|"
    "{{ {1: 'a', 2: 'b'} | dictsort(reverse=true) }}|{{ {2: 'b', 1: 'a'} | tojson(sort_keys=true) }}|{{ t | items | list }}",
    "{% filter upper %}shout {{ 'this' }}{% endfilter %}|{% filter trim | replace('a', 'o') %}\n  banana  \n{% endfilter %}|"
    "{% for x in [1, 2] %}{% filter upper %}{{ 'ab'[x - 1] }}{% endfilter %}{% endfor %}",
    # tests
    "{{ x is defined }}{{ u is defined }}{{ u is undefined }}{{ none is none }}{{ 1 is number }}{{ true is number }}{{ 1 is integer }}"
    "{{ true is integer }}{{ 1.0 is float }}{{ 's' is string }}{{ d is mapping }}{{ xs is iterable }}{{ 's' is iterable }}{{ 1 is iterable }}"
    "{{ xs is sequence }}{{ true is boolean }}{{ 1 is true }}{{ true is true }}{{ false is false }}{{ 0 is false }}{{ 3 is odd }}{{ 4 is even }}"
    "{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ 'a' is eq 'a' }}{{ 2 is gt 1 }}{{ 2 is in xs }}{{ none is sameas none }}"
    "{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ 'trim' is filter }}{{ range is callable }}{{ x is not none }}{{ u is iterable }}",
    # methods
    "{{ s.startswith('hé') }}{{ s.endswith(('x', 'ld')) }}|{{ '  pad  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '\\n\\nhi\\n'.lstrip('\\n') }}|"
    "{{ 'hi  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ '  a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ s.upper() }}|{{ 'Hello'.lower() }}|"
    "{{ 'a-b'.replace('-', '+') }}|{{ ', '.join(['x', 'y']) }}|{{ 'abcabc'.find('c') }}|{{ 'abcabc'.count('bc') }}|{{ 'hello world'.title() }}|"
    "{{ 'hELLO'.capitalize() }}|{{ '<think>a</think>b'.split('</think>')[-1] }}",
    # globals
    "{{ dict(a=1, b='x') }}|{{ dict(d, c=3) | tojson }}|{{ namespace(q=1).q }}",
    "{{ strftime_now('%Y-%m-%d %H:%M %d %b %B %A') }}",
    "{% set m = {'z': 1, 'a': 2} %}{{ m | tojson }}{{ m.z }}",
    "[{{ u }}]|{{ u ~ 'x' }}|{{ u | length }}|{{ u | list }}|{% for i in u %}no{% else %}empty{% endfor %}|{{ u | items | list }}",
    "{% generation %}gen {{ 1 }}{% endgeneration %}|{% print 'printed' %}",
    "{{ messages[0]['content'] if messages else 'none' }}{{ messages | selectattr('role', 'equalto', 'user') | list | length }}",
    # macros
    "{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }}|{{ greet('b', '?') }}|"
    "{{ greet(punct='.', name='c') }}|{{ greet() }}",
    "{% macro count(n) %}{{ n }}{% if n > 0 %},{{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(3) }}",
    "{% set top = 'T' %}{% macro m() %}{{ top }}{{ xs | length }}{{ inner is defined }}{% endmacro %}"
    "{% for inner in [1] %}{{ m() }}{% endfor %}",
    "{% macro m(x) %}\n  [{{ x }}]\n{% endmacro %}\n{{ m(1) }}{{ m(2) | trim }}",
    # errors Jinja2 raises; we must throw too
    "{{ u.attr }}",
    "{{ 'a' + 1 }}",
    "{{ 1 / 0 }}",
    "{{ raise_exception('custom ' ~ 42) }}",
    "{% for a, b in [1, 2] %}{% endfor %}",
    "{{ none.x.y }}",
    "{{ u() }}",
    "{{ 'abc'[::0] }}",
    "{{ 1 < 'a' }}",
    "{% set y = 1 %}{% set y.z = 2 %}",
    "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    "{% macro g(a) %}{% endmacro %}{{ g(1, 2) }}",
    "{{ 'x' | int(base=2, default=1, extra=3) }}",
    "{{ xs | join(attribute=1) }}",
    "{% if x %}no end",
    "{{ x ",
    "{% endfor %}",
    "{{ 'unterminated }}",
    "{% unknowntag %}",
    "{{ (1, 2] }}",
    "{% for %}{% endfor %}",
    "{{ x | }}",
    "{% if x %}{% else %}{% else %}{% endif %}",
    "{{ x.1a }}",
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


def render_snippet(text):
    try:
        return {"expected": chat_template_utils._compile_jinja_template(text).render(**SNIPPET_VARIABLES)}
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:
            return {"raises": e.message}
        return {"error": f"{type(e).__name__}: {e}"}
    except (TypeError, ValueError, IndexError, KeyError, AttributeError, ZeroDivisionError, RecursionError) as e:
        return {"error": f"{type(e).__name__}: {str(e)[:200]}"}


def main():
    chat_template_utils.datetime = FixedDatetime  # strftime_now reads datetime.now()
    snippets = [dict(template=t, **render_snippet(t)) for t in SNIPPETS]
    (OUT / "jinja_snippets.json").write_text(json.dumps({
        "source": "transformers.utils.chat_template_utils._compile_jinja_template(template).render(**variables)",
        "versions": {"transformers": transformers.__version__, "jinja2": jinja2.__version__},
        "now": FIXED_NOW.isoformat() + " local time (strftime_now)",
        "variables": SNIPPET_VARIABLES,
        "snippets": snippets}, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(snippets)} snippets: " + str({k: sum(1 for c in snippets if k in c) for k in ("expected", "raises", "error")}))
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
