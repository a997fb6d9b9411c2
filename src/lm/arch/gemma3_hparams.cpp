#include "lm/arch/gemma3_hparams.h"

#include <cmath>
#include <string>

#include "base/error.h"

namespace lm {

namespace {

// Gemma 3 alternates five local (sliding-window) layers with one global layer: layer l is
// global when l % 6 == 5 (Gemma 3 technical report, arXiv 2503.19786, section 2; llama.cpp's
// swa pattern 6).
constexpr int kSlidingPattern = 6;
// RoPE base of the local layers (the report's "10k for local layers"); the global layers use
// gemma3.rope.freq_base (1M).
constexpr double kLocalRopeBase = 10000.0;
// Gemma 3 27B, the size whose query_pre_attn_scalar is dim / heads.
constexpr int kGemma3BigModelLayers = 62;

}  // namespace

void apply_gemma_block(const ModelConfig& config, int big_model_layers, LlamaHyperParams& hyper) {
  hyper.rope_style = kernels::RopeStyle::kNeox;
  hyper.ffn_activation = FfnActivation::kGeluTanh;
  hyper.embedding_scale = std::sqrt(static_cast<float>(config.dim));
  const int query_pre_attn_scalar = config.n_layers == big_model_layers ? config.dim / config.n_heads : config.head_dim;
  hyper.attention_scale = 1.0f / std::sqrt(static_cast<float>(query_pre_attn_scalar));
}

void apply_gemma3_hparams(const gguf::GgufFile& file, const ModelConfig& config, LlamaHyperParams& hyper) {
  const std::string p = "gemma3.";
  const auto fail = [&](const std::string& what) {
    return base::FormatError("GGUF file '" + file.path() + "': " + what);
  };
  const int64_t window = file.require_int(p + "attention.sliding_window");
  if (window <= 0 || window > (int64_t{1} << 30)) {
    throw fail(p + "attention.sliding_window = " + std::to_string(window) + " is out of range");
  }
  const double local_base = file.get_float(p + "rope.freq_base_swa").value_or(kLocalRopeBase);
  if (!(local_base > 0.0) || !std::isfinite(local_base)) {
    throw fail(p + "rope.freq_base_swa = " + std::to_string(local_base) + " is not a positive number");
  }
  apply_gemma_block(config, kGemma3BigModelLayers, hyper);
  hyper.sliding_window.assign(static_cast<std::size_t>(config.n_layers), std::nullopt);
  hyper.rope_theta.assign(static_cast<std::size_t>(config.n_layers), config.rope_theta);
  for (int l = 0; l < config.n_layers; ++l) {
    if (l % kSlidingPattern == kSlidingPattern - 1) continue;  // global layer
    hyper.sliding_window[l] = window;
    hyper.rope_theta[l] = static_cast<float>(local_base);
  }
}

}  // namespace lm
