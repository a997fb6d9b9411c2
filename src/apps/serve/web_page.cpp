// The page `veloxquant serve` answers at /: chat with the model (streamed through
// /v1/chat/completions), choose the cache per conversation (the request's `veloxquant` field),
// and watch each slot's KV bytes beside the f16 equivalent, polled from /metrics. One static
// page, no build step, no external resources.
#include "apps/serve/openai_server.h"

namespace apps::serve {

const std::string& web_page_html() {
  static const std::string page = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>veloxquant serve</title>
<style>
body { font-family: system-ui, sans-serif; margin: 0; display: flex; height: 100vh; }
main { flex: 3; display: flex; flex-direction: column; padding: 1em; }
aside { flex: 1; border-left: 1px solid #ccc; padding: 1em; background: #f7f7f7; overflow: auto; }
#log { flex: 1; overflow: auto; border: 1px solid #ddd; padding: .5em; background: #fff; }
.turn { margin: .4em 0; white-space: pre-wrap; }
.user { color: #1a4d8f; } .assistant { color: #222; } .error { color: #b00020; }
form { display: flex; gap: .5em; margin-top: .5em; }
#prompt { flex: 1; }
table { border-collapse: collapse; width: 100%; } td, th { text-align: right; padding: 2px 4px; }
</style>
</head>
<body>
<main>
  <h3>veloxquant serve</h3>
  <div>
    cache: <select id="cache">
      <option value="">server default</option>
      <option value='{"method":"none"}'>none (native f16)</option>
      <option value='{"preset":"q8"}'>preset q8</option>
      <option value='{"preset":"q5"}'>preset q5</option>
      <option value='{"preset":"q4"}'>preset q4</option>
      <option value='{"preset":"q3"}'>preset q3</option>
      <option value='{"method":"kivi","bits":4}'>kivi 4-bit</option>
      <option value='{"method":"turboquant_rvq","bits":2,"set":{"rvq_value_bits":4}}'>turboquant_rvq 2-bit keys, 4-bit values</option>
    </select>
    max tokens <input id="max_tokens" type="number" value="128" min="1" style="width:5em">
    <button id="reset" type="button">new conversation</button>
  </div>
  <div id="log"></div>
  <form id="form"><input id="prompt" placeholder="Say something" autocomplete="off"><button id="send">Send</button></form>
</main>
<aside>
  <h4>KV cache per slot</h4>
  <table id="slots"><thead><tr><th>slot</th><th>method</th><th>tokens</th><th>KV bytes</th><th>native f16</th><th>x smaller</th></tr></thead><tbody></tbody></table>
  <p>total KV resident: <span id="kv_total">-</span></p>
  <p>last reply: <span id="last_kv">-</span></p>
  <p>prompt cache: <span id="prefix">-</span></p>
</aside>
<script>
let messages = [];
const log = document.getElementById('log');
function turn(role, text) {
  const div = document.createElement('div');
  div.className = 'turn ' + role;
  div.textContent = text;
  log.appendChild(div);
  log.scrollTop = log.scrollHeight;
  return div;
}
function fmt(bytes) {
  if (bytes < 1024) return bytes + ' B';
  if (bytes < 1048576) return (bytes / 1024).toFixed(1) + ' KiB';
  return (bytes / 1048576).toFixed(2) + ' MiB';
}
document.getElementById('reset').onclick = () => { messages = []; log.textContent = ''; };
document.getElementById('form').onsubmit = async (ev) => {
  ev.preventDefault();
  const input = document.getElementById('prompt');
  const text = input.value;
  if (!text) return;
  input.value = '';
  messages.push({role: 'user', content: text});
  turn('user', text);
  const out = turn('assistant', '');
  const body = {messages, stream: true, temperature: 0,
                max_tokens: parseInt(document.getElementById('max_tokens').value) || 128};
  const cache = document.getElementById('cache').value;
  if (cache) body.veloxquant = JSON.parse(cache);
  try {
    const res = await fetch('/v1/chat/completions', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify(body)});
    if (!res.ok) { const e = await res.json(); out.className = 'turn error'; out.textContent = e.error.message; messages.pop(); return; }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = '', reply = '';
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      let at;
      while ((at = buffer.indexOf('\n\n')) >= 0) {
        const line = buffer.slice(0, at); buffer = buffer.slice(at + 2);
        if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
        const chunk = JSON.parse(line.slice(6));
        if (chunk.error) { out.className = 'turn error'; out.textContent = chunk.error.message; continue; }
        const c = chunk.choices && chunk.choices[0];
        if (c && c.delta && c.delta.content) { reply += c.delta.content; out.textContent = reply; }
        if (chunk.veloxquant) {
          const v = chunk.veloxquant;
          document.getElementById('last_kv').textContent = v.method + ': ' + fmt(v.kv_bytes) + ' vs ' + fmt(v.kv_native_bytes) + ' for the native f16 cache';
        }
      }
    }
    out.dataset.done = '1';
    messages.push({role: 'assistant', content: reply});
  } catch (e) { out.className = 'turn error'; out.textContent = String(e); }
};
async function poll() {
  try {
    const text = await (await fetch('/metrics')).text();
    const rows = {};
    let total = null, hits = 0, misses = 0;
    for (const line of text.split('\n')) {
      let m;
      if ((m = line.match(/^veloxquant_slot_kv_bytes\{slot="(\d+)",method="([^"]*)"\} (\d+)/))) { (rows[m[1]] ||= {}).kv = +m[3]; rows[m[1]].method = m[2]; }
      else if ((m = line.match(/^veloxquant_slot_kv_native_bytes\{slot="(\d+)"\} (\d+)/))) (rows[m[1]] ||= {}).f16 = +m[2];
      else if ((m = line.match(/^veloxquant_slot_tokens\{slot="(\d+)"\} (\d+)/))) (rows[m[1]] ||= {}).tokens = +m[2];
      else if ((m = line.match(/^veloxquant_kv_bytes_resident (\d+)/))) total = +m[1];
      else if ((m = line.match(/^veloxquant_prompt_cache_hits_total (\d+)/))) hits = +m[1];
      else if ((m = line.match(/^veloxquant_prompt_cache_misses_total (\d+)/))) misses = +m[1];
    }
    const body = document.querySelector('#slots tbody');
    body.textContent = '';
    for (const [slot, r] of Object.entries(rows)) {
      const tr = document.createElement('tr');
      const ratio = r.kv > 0 ? (r.f16 / r.kv).toFixed(2) : '-';
      for (const v of [slot, r.method || '', r.tokens || 0, fmt(r.kv || 0), fmt(r.f16 || 0), ratio]) {
        const td = document.createElement('td'); td.textContent = v; tr.appendChild(td);
      }
      body.appendChild(tr);
    }
    if (total !== null) document.getElementById('kv_total').textContent = fmt(total);
    document.getElementById('prefix').textContent = hits + ' hits, ' + misses + ' misses';
  } catch (e) {}
}
setInterval(poll, 500);
poll();
</script>
</body>
</html>
)HTML";
  return page;
}

}  // namespace apps::serve
