#include "lm/arch/sliding_window_hparams.h"

#include "base/error.h"

namespace lm {

void apply_uniform_sliding_window(const gguf::GgufFile& file, const std::string& arch, const ModelConfig& config,
                                  LlamaHyperParams& hyper) {
  const std::string key = arch + ".attention.sliding_window";
  const std::optional<int64_t> window = file.get_int(key);
  if (!window || *window == 0) return;
  if (*window < 0 || *window > (int64_t{1} << 30)) {
    throw base::FormatError("GGUF file '" + file.path() + "': " + key + " = " + std::to_string(*window) +
                            " is out of range");
  }
  hyper.sliding_window.assign(static_cast<std::size_t>(config.n_layers), *window);
}

}  // namespace lm
