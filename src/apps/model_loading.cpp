#include "apps/model_loading.h"

#include <algorithm>

#include <CLI/CLI.hpp>

#include "apps/int_flag.h"
#include "base/error.h"
#include "base/thread_pool.h"

namespace apps {

int ModelFlags::thread_count() const { return static_cast<int>(parse_int_flag("--threads", threads, 0, 4096)); }

void add_model_flags(CLI::App& cmd, ModelFlags& flags, ModelFlagOptions options) {
  CLI::Option* model =
      cmd.add_option("--model,-m", flags.model, "Model file: GGUF or llama2.c checkpoint")->type_name("PATH");
  if (options.model_required) model->required();
  cmd.add_option("--tokenizer", flags.tokenizer, "Tokenizer file (llama2.c tokenizer or a GGUF)")->type_name("PATH");
  cmd.add_option("--threads,-t", flags.threads, "Worker threads (0 = all cores)")
      ->capture_default_str()
      ->type_name("N");
  if (options.kv_dtype) {
    cmd.add_option("--kv-dtype", flags.kv_dtype,
                   "Native KV cache element type: f16, bf16, f32, or llama.cpp's block types q8_0, q5_0, q4_0")
        ->capture_default_str()
        ->type_name("TYPE");
  }
}

void size_global_pool(int threads) {
  if (threads > 0 && base::ThreadPool::global().size() != threads) base::ThreadPool::set_global_threads(threads);
}

lm::LoadedModel load_model_from_flags(const std::string& model_path, const std::string& tokenizer_path,
                                      const std::string& kv_dtype, int threads) {
  size_global_pool(threads);
  lm::LoadOptions load_options;
  load_options.kv_type = lm::parse_kv_cache_type(kv_dtype);
  load_options.threads = threads;
  if (!tokenizer_path.empty()) load_options.tokenizer_path = tokenizer_path;
  return lm::load(model_path, load_options);
}

std::optional<lm::KVCacheType> block_kv_type_under_test(const std::string& kv_dtype, bool method_given) {
  const lm::KVCacheType type = lm::parse_kv_cache_type(kv_dtype);
  if (!lm::is_block_kv_type(type)) return std::nullopt;
  if (method_given) {
    throw base::InvalidArgument("--kv-dtype " + kv_dtype +
                                " is itself the cache under test (against the f16 native cache); it cannot be "
                                "combined with --method/--preset (give those with --kv-dtype f16)");
  }
  return type;
}

void require_float_baseline(const std::string& kv_dtype, const std::string& command) {
  if (lm::is_block_kv_type(lm::parse_kv_cache_type(kv_dtype))) {
    throw base::InvalidArgument(command + ": --kv-dtype " + kv_dtype +
                                " would quantize the native baseline; measure llama.cpp's types beside the f16 "
                                "cache with --kv-dtypes " +
                                kv_dtype);
  }
}

std::vector<lm::KVCacheType> parse_kv_type_list(const std::string& list) {
  std::vector<lm::KVCacheType> types;
  std::size_t begin = 0;
  while (begin <= list.size() && !list.empty()) {
    const std::size_t end = std::min(list.find(',', begin), list.size());
    const std::string name = list.substr(begin, end - begin);
    const lm::KVCacheType type = lm::parse_kv_cache_type(name);  // names the bad entry
    if (std::find(types.begin(), types.end(), type) != types.end()) {
      throw base::InvalidArgument("--kv-dtypes names '" + name + "' twice");
    }
    types.push_back(type);
    begin = end + 1;
  }
  return types;
}

}  // namespace apps
