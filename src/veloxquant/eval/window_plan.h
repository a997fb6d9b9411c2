#pragma once
// Which tokens each teacher-forced window feeds, and which predictions count.
//
// Convention: a "target" is an absolute index t into the token stream; it is predicted by the
// logits row of the token just before it (t - 1), which must lie in the same window. All
// ranges are half-open.
#include <cstdint>
#include <vector>

namespace veloxquant::eval {

struct EvalWindow {
  int64_t begin = 0;  // tokens[begin, end) are fed, in order, to fresh caches
  int64_t end = 0;
  // llama-perplexity overwrites the first token of every chunk with BOS so each chunk looks
  // like the start of a document.
  bool first_token_is_bos = false;
  // Targets whose log-probability enters the perplexity.
  int64_t score_begin = 0;
  // Targets where KL(baseline || method) and top-1 agreement are taken: the last part of the
  // window (long-context mode), intersected with the scored targets.
  int64_t compare_begin = 0;

  int64_t size() const { return end - begin; }
  int64_t scored() const { return end - score_begin; }
  int64_t compared() const { return end - compare_begin; }
};

// Sliding windows of exactly `ctx` tokens starting every `stride` tokens (stride == ctx: no
// overlap). Each window scores only targets no earlier window scored, so every target is
// counted once (the Hugging Face strided-perplexity recipe). Tokens after the last full
// window are left out so every window holds the same number of tokens (and bytes/token are
// comparable). `tail` in (0, 1]: KL/top-1 are taken over the last ceil(tail * ctx) targets.
// Throws base::InvalidArgument when n_tokens < ctx, ctx < 2, stride outside [1, ctx], or
// tail outside (0, 1].
std::vector<EvalWindow> plan_sliding_windows(int64_t n_tokens, int64_t ctx, int64_t stride, double tail);

// llama.cpp llama-perplexity (examples/perplexity, `perplexity()`): floor(n_tokens / ctx)
// non-overlapping chunks, at most max_chunks of them when max_chunks > 0; the first token of
// each chunk is replaced by BOS; only the second half is scored: logits rows ctx/2 .. ctx-2
// predict targets ctx/2+1 .. ctx-1 (ctx - 1 - ctx/2 targets per chunk). `tail` as above.
std::vector<EvalWindow> plan_llama_chunks(int64_t n_tokens, int64_t ctx, int64_t max_chunks, double tail);

}  // namespace veloxquant::eval
