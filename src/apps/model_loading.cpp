#include "apps/model_loading.h"

#include "lm/dtype.h"

namespace apps {

lm::LoadedModel load_model_from_flags(const std::string& model_path, const std::string& tokenizer_path,
                                      const std::string& kv_dtype, int threads) {
  lm::LoadOptions load_options;
  load_options.kv_dtype = lm::parse_float_dtype(kv_dtype);
  load_options.threads = threads;
  if (!tokenizer_path.empty()) load_options.tokenizer_path = tokenizer_path;
  return lm::load(model_path, load_options);
}

}  // namespace apps
