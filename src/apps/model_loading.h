#pragma once
// Loading a model from the flags every model-running subcommand shares (--model, --tokenizer,
// --kv-dtype, --threads), so the commands parse and validate them one way; and the --kv-dtype
// rules of the commands that compare a cache with the native one.
#include <optional>
#include <string>
#include <vector>

#include "lm/kv_cache_type.h"
#include "lm/load.h"

namespace apps {

// Throws base::InvalidArgument for a bad --kv-dtype and the loader's typed errors for files.
lm::LoadedModel load_model_from_flags(const std::string& model_path, const std::string& tokenizer_path,
                                      const std::string& kv_dtype, int threads);

// `eval --kv-dtype q8_0|q5_0|q4_0`: llama.cpp's block type is the cache under test, measured
// against the f16 native cache of the same run (the comparison llama-perplexity
// --kl-divergence makes). Returns that type, or nullopt for a float type (which is the native
// cache itself). A block type together with --method/--preset is refused (base::InvalidArgument):
// the run would have two caches under test.
std::optional<lm::KVCacheType> block_kv_type_under_test(const std::string& kv_dtype, bool method_given);

// The commands with a native baseline beside several caches (bench-methods, eval-needle,
// bench-host --methods) refuse a block --kv-dtype, which would quantize the baseline, pointing
// to --kv-dtypes (base::InvalidArgument naming `command` and the type).
void require_float_baseline(const std::string& kv_dtype, const std::string& command);

// --kv-dtypes "q8_0,q5_0,q4_0" (bench-methods, eval-needle, bench-host --methods): the host's
// native cache in each of these types, measured beside the native cache of the run. Throws
// base::InvalidArgument naming a bad or repeated entry.
std::vector<lm::KVCacheType> parse_kv_type_list(const std::string& list);

}  // namespace apps
