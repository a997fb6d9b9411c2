// A downstream program: find_package(veloxquant CONFIG), link veloxquant::veloxquant, load a
// model with lm, wire a 4-bit TurboQuant-RVQ cache with patch_model_kv_cache, generate.
//   cmake --install build --prefix /tmp/vq
//   cmake -S examples/downstream -B /tmp/ds -DCMAKE_PREFIX_PATH=/tmp/vq && cmake --build /tmp/ds
//   /tmp/ds/demo ../shared/models/stories260K/stories260K.gguf
#include <veloxquant/veloxquant.h>
#include <lm/load.h>
#include <lm/generate.h>
#include <cstdio>
int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: demo MODEL.gguf\n");
    return 2;
  }
  auto loaded = lm::load(argv[1]);
  veloxquant::KVCacheConfig config;
  config.method = "turboquant_rvq";
  config.bit_width_inlier = 4;
  auto caches = veloxquant::integration::patch_model_kv_cache(*loaded.model, config);
  lm::GenerateOptions options;
  options.max_tokens = 20;
  std::printf("%zu caches\n%s\n", caches.size(),
              lm::generate(*loaded.model, *loaded.tokenizer, "Once upon a time", options).c_str());
}
