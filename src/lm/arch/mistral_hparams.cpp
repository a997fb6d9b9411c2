#include "lm/arch/mistral_hparams.h"

#include <string>

#include "base/error.h"

namespace lm {

void apply_llama_sliding_window(const gguf::GgufFile& file, const ModelConfig& config, LlamaHyperParams& hyper) {
  const std::string key = "llama.attention.sliding_window";
  const std::optional<int64_t> window = file.get_int(key);
  if (!window || *window == 0) return;
  if (*window < 0 || *window > (int64_t{1} << 30)) {
    throw base::FormatError("GGUF file '" + file.path() + "': " + key + " = " + std::to_string(*window) +
                            " is out of range");
  }
  hyper.sliding_window.assign(static_cast<std::size_t>(config.n_layers), *window);
}

}  // namespace lm
