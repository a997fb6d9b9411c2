#include "lm/arch/gemma2_hparams.h"

#include <cmath>
#include <string>

#include "base/error.h"
#include "lm/arch/gemma3_hparams.h"

namespace lm {

namespace {

// Gemma 2 alternates a local (sliding-window) layer with a global one, starting local (Gemma 2
// report, arXiv 2408.00118, section 2; transformers' layer_types; llama.cpp's swa pattern 2).
constexpr int kSlidingPattern = 2;
constexpr int64_t kDefaultWindow = 4096;
constexpr double kDefaultAttnSoftcap = 50.0, kDefaultFinalSoftcap = 30.0;
// Gemma 2 27B, the size whose query_pre_attn_scalar is dim / heads.
constexpr int kGemma2BigModelLayers = 46;

}  // namespace

void apply_gemma2_hparams(const gguf::GgufFile& file, const ModelConfig& config, LlamaHyperParams& hyper) {
  const std::string p = "gemma2.";
  const auto fail = [&](const std::string& what) {
    return base::FormatError("GGUF file '" + file.path() + "': " + what);
  };
  const int64_t window = file.get_int(p + "attention.sliding_window").value_or(kDefaultWindow);
  if (window <= 0 || window > (int64_t{1} << 30)) {
    throw fail(p + "attention.sliding_window = " + std::to_string(window) + " is out of range");
  }
  const auto softcap = [&](const std::string& key, double fallback) {
    const double v = file.get_float(p + key).value_or(fallback);
    if (!(v >= 0.0) || !std::isfinite(v)) throw fail(p + key + " = " + std::to_string(v) + " is not a number >= 0");
    return static_cast<float>(v);
  };
  apply_gemma_block(config, kGemma2BigModelLayers, hyper);
  hyper.attn_logit_softcap = softcap("attn_logit_softcapping", kDefaultAttnSoftcap);
  hyper.final_logit_softcap = softcap("final_logit_softcapping", kDefaultFinalSoftcap);
  hyper.sliding_window.assign(static_cast<std::size_t>(config.n_layers), std::nullopt);
  for (int l = 0; l < config.n_layers; ++l) {
    if (l % kSlidingPattern == 0) hyper.sliding_window[l] = window;
  }
}

}  // namespace lm
