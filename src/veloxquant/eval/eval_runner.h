#pragma once
// Teacher-forced evaluation of KV-cache methods against the host's native cache, on the same
// windows in the same run: for every window, fresh native caches (the baseline) and fresh
// caches of every method are fed the same tokens in the same forward batches; the logits of
// each batch are compared row by row before the next batch, so no full logits matrix of the
// window is ever held.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lm/model.h"

namespace veloxquant::eval {

enum class Chunking {
  kSliding,  // windows of ctx tokens every stride tokens, every target scored once
  kLlama,    // llama.cpp llama-perplexity chunks (BOS first, second half scored)
};

struct EvalOptions {
  Chunking chunking = Chunking::kSliding;
  int64_t ctx = 512;
  int64_t stride = 0;      // sliding only; 0 = ctx (no overlap)
  int64_t max_chunks = 0;  // llama only; 0 = all
  // KL/top-1 over the last `tail` fraction of each window (long-context mode); 1 = all
  // scored targets.
  double tail = 1.0;
  // Tokens per forward call (a prefill chunk). Smaller batches make later tokens read what
  // the method stored for earlier batches, as in real chunked prefill; 1 = decode-like.
  int64_t batch = 512;
  // Called after each window with (windows done, windows total); for progress lines.
  std::function<void(int64_t, int64_t)> on_window;
};

struct MethodUnderTest {
  std::string name;
  // Fresh caches for one window (one per decoder layer), e.g. KVCacheBuilder::for_model.
  std::function<lm::CacheList()> make_caches;
};

// Figures for one set of caches (the baseline or a method).
struct SideResult {
  std::string name;
  double ppl = 0.0;
  double ppl_stderr = 0.0;
  double tok_per_s = 0.0;  // tokens fed / seconds inside forward()
  double forward_seconds = 0.0;
  // Sum of the caches' nbytes() after each window / tokens the window fed, averaged over
  // windows: what is really resident per token (growth slack, scales and windows included).
  double kv_bytes_per_token = 0.0;
  // Method only (the baseline against itself is 0 / 100 by construction and not computed).
  double kld = 0.0;
  double kld_max = 0.0;
  double top1_agreement = 0.0;  // percent
};

struct EvalRun {
  SideResult baseline;
  std::vector<SideResult> methods;  // in the order given
  int64_t ctx = 0;
  int64_t n_windows = 0;
  int64_t n_text_tokens = 0;   // tokens in the (truncated) stream, BOS included
  int64_t n_fed = 0;           // tokens fed per set of caches (n_windows * ctx)
  int64_t n_scored = 0;        // targets in the perplexity
  int64_t n_compared = 0;      // positions in KL / top-1
  int64_t peak_rss_bytes = 0;  // process peak during the run (model weights included)
};

// Runs the evaluation. `bos` is the id written over the first token of each llama chunk
// (pass TokenizedText::bos). Throws base::InvalidArgument when ctx exceeds the model's
// context length, the text is shorter than one window, batch < 1, or a method has no cache
// factory; errors from the methods' factories propagate unchanged.
EvalRun run_evaluation(const lm::Model& model, std::span<const int32_t> tokens, std::optional<int32_t> bos,
                       const std::vector<MethodUnderTest>& methods, const EvalOptions& options);

}  // namespace veloxquant::eval
