#pragma once
// Loading a model from the flags every model-running subcommand shares (--model, --tokenizer,
// --kv-dtype, --threads), so the commands parse and validate them one way; and the --kv-dtype
// rules of the commands that compare a cache with the native one.
#include <optional>
#include <string>
#include <vector>

#include "lm/cache/kv_cache_type.h"
#include "lm/load.h"

namespace CLI {
class App;
}

namespace apps {

// The flags every model-running command declares (--model, --tokenizer, --threads, --kv-dtype),
// declared once by add_model_flags so their names, help and parsing cannot drift apart between
// commands (they had: some parsed --threads as CLI11 ints, some as checked text, and the
// --kv-dtype help listed different types). A command's flag struct derives from this one.
struct ModelFlags {
  std::string model;
  std::string tokenizer;
  // Text, parsed by thread_count(): "", "abc", -1 and 2^32 get one message naming --threads.
  std::string threads = "0";
  std::string kv_dtype = "f16";

  // --threads in [0, 4096] (0 = all cores); base::InvalidArgument naming the flag otherwise.
  int thread_count() const;
};

struct ModelFlagOptions {
  // CLI11 refuses a missing --model; false for the commands that check it themselves.
  bool model_required = true;
  // false for commands whose cache type is fixed (allocate-bits measures in f16).
  bool kv_dtype = true;
};

void add_model_flags(CLI::App& cmd, ModelFlags& flags, ModelFlagOptions options = {});

// Sizes the process's global pool (base::ThreadPool::global()) to --threads before a model is
// loaded. Every veloxquant cache attends and flushes on that pool, and the model takes it as its
// own when the sizes agree; without this, `--threads 1` on a 2-core machine ran the model on one
// thread and the caches on two, and any other count ran two pools' workers against each other.
// 0 (all cores) is the pool's default and leaves it as it is.
void size_global_pool(int threads);

// Throws base::InvalidArgument for a bad --kv-dtype and the loader's typed errors for files.
// Sizes the global pool to `threads` first (size_global_pool).
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
