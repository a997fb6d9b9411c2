// Writes one window's keys, values and queries (f32, as the host hands them to its caches) to raw
// files, so that quantizer studies (issue 12's q3 work) can run offline in numpy against the real
// rows instead of Gaussian stand-ins.
//
//   build/bench/kv_rows_dump MODEL TEXT OUT_PREFIX [CTX=2048] [SKIP_TOKENS=0]
//
// One window of CTX tokens (BOS first, then the text from token SKIP_TOKENS on) goes through the
// model in 512-token calls (the host's prefill). Writes OUT_PREFIX.{k,v,q}.f32, each
// [layers, heads, CTX, dim] row-major, and OUT_PREFIX.json with the shapes.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "lm/cache/cache.h"
#include "lm/load.h"
#include "lm/model.h"
#include "recording_kv_cache.h"

namespace {

// Forwards to the host's own cache and appends every call's f32 rows ([heads, rows, dim] each).
class RecordingCache final : public bench_support::RecordingKVCache {
 public:
  using RecordingKVCache::RecordingKVCache;
  std::shared_ptr<lm::KVCache> clone() const override { return std::make_shared<RecordingCache>(*this); }

  std::vector<std::vector<float>> k_calls, v_calls, q_calls;
  std::vector<int64_t> rows;

 private:
  void record(const lm::Tensor& keys, const lm::Tensor& values, int64_t /*at*/) override {
    k_calls.push_back(keys.to_f32()), v_calls.push_back(values.to_f32()), q_calls.push_back(pending_queries());
    rows.push_back(keys.dim(2));
  }
};

// Appends one layer's calls as [heads, total rows, dim] to `out`.
void write_layer(std::ofstream& out, const std::vector<std::vector<float>>& calls, const std::vector<int64_t>& rows,
                 int64_t heads, int64_t dim) {
  for (int64_t h = 0; h < heads; ++h) {
    for (std::size_t c = 0; c < calls.size(); ++c) {
      const float* at = calls[c].data() + h * rows[c] * dim;
      out.write(reinterpret_cast<const char*>(at), static_cast<std::streamsize>(rows[c] * dim * sizeof(float)));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL TEXT OUT_PREFIX [CTX=2048] [SKIP_TOKENS=0]\n", argv[0]);
    return 2;
  }
  try {
    const int64_t ctx = argc > 4 ? std::atoll(argv[4]) : 2048;
    const int64_t skip = argc > 5 ? std::atoll(argv[5]) : 0;
    constexpr int64_t kCall = 512;
    if (ctx < kCall || ctx % kCall != 0 || skip < 0) {
      std::fprintf(stderr, "CTX must be a positive multiple of 512, SKIP_TOKENS >= 0\n");
      return 2;
    }
    base::ThreadPool::set_global_threads(2);
    lm::LoadOptions options;
    options.threads = 2;
    const lm::LoadedModel loaded = lm::load(argv[1], options);
    std::ifstream file(argv[2]);
    if (!file) throw std::runtime_error(std::string("cannot read ") + argv[2]);
    std::stringstream text;
    text << file.rdbuf();
    std::vector<int32_t> all = loaded.tokenizer->encode(text.str(), true);
    if (static_cast<int64_t>(all.size()) < skip + ctx) throw std::runtime_error("text shorter than SKIP + CTX tokens");
    std::vector<int32_t> tokens{all[0]};
    tokens.insert(tokens.end(), all.begin() + 1 + skip, all.begin() + skip + ctx);
    lm::CacheList caches = lm::make_prompt_cache(*loaded.model);
    std::vector<RecordingCache*> recorders;
    for (auto& cache : caches) {
      auto recorder = std::make_shared<RecordingCache>(cache);
      recorders.push_back(recorder.get());
      cache = recorder;
    }
    std::vector<float> logits;
    for (int64_t i = 0; i < ctx; i += kCall) {
      const std::vector<int32_t> chunk(tokens.begin() + i, tokens.begin() + i + kCall);
      loaded.model->forward(chunk, caches, logits);
    }
    const std::string prefix = argv[3];
    std::ofstream k_out(prefix + ".k.f32", std::ios::binary), v_out(prefix + ".v.f32", std::ios::binary),
        q_out(prefix + ".q.f32", std::ios::binary);
    for (const RecordingCache* r : recorders) {
      if (r->q_calls.empty() || r->q_calls.front().empty()) throw std::runtime_error("the host passed no queries");
      write_layer(k_out, r->k_calls, r->rows, r->heads, r->key_dim);
      write_layer(v_out, r->v_calls, r->rows, r->heads, r->value_dim);
      write_layer(q_out, r->q_calls, r->rows, r->query_heads, r->key_dim);
    }
    const RecordingCache& r = *recorders.front();
    std::ofstream meta(prefix + ".json");
    meta << "{\"layers\": " << recorders.size() << ", \"heads\": " << r.heads << ", \"query_heads\": " << r.query_heads
         << ", \"rows\": " << ctx << ", \"key_dim\": " << r.key_dim << ", \"value_dim\": " << r.value_dim << "}\n";
    std::printf("wrote %s.{k,v,q}.f32 (%zu layers, %lld kv heads, %lld query heads, %lld rows)\n", prefix.c_str(),
                recorders.size(), static_cast<long long>(r.heads), static_cast<long long>(r.query_heads),
                static_cast<long long>(ctx));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
