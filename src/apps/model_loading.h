#pragma once
// Loading a model from the flags every model-running subcommand shares (--model, --tokenizer,
// --kv-dtype, --threads), so the commands parse and validate them one way.
#include <string>

#include "lm/load.h"

namespace apps {

// Throws base::InvalidArgument for a bad --kv-dtype and the loader's typed errors for files.
lm::LoadedModel load_model_from_flags(const std::string& model_path, const std::string& tokenizer_path,
                                      const std::string& kv_dtype, int threads);

}  // namespace apps
