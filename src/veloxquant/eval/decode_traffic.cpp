#include "veloxquant/eval/decode_traffic.h"

#include "base/error.h"
#include "lm/gguf/gguf_file.h"

namespace veloxquant::eval {

namespace {

constexpr const char* kEmbedding = "token_embd.weight";
constexpr const char* kClassifier = "output.weight";

// A llama2.c checkpoint in the names a GGUF would use: same rule, same code path.
std::vector<WeightTensorSize> llama2c_tensors(const lm::ModelConfig& c) {
  const auto f32 = [](int64_t count) { return static_cast<std::size_t>(count) * sizeof(float); };
  const int64_t head_dim = c.head_dim > 0 ? c.head_dim : (c.n_heads > 0 ? c.dim / c.n_heads : 0);
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads) * head_dim;
  std::vector<WeightTensorSize> t;
  t.push_back({kEmbedding, f32(int64_t{c.vocab_size} * c.dim), c.vocab_size});
  // Shared or separate, the classifier reads vocab x dim once: write it as separate.
  t.push_back({kClassifier, f32(int64_t{c.vocab_size} * c.dim), c.vocab_size});
  t.push_back({"output_norm.weight", f32(c.dim), 1});
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const std::string p = "blk." + std::to_string(layer) + ".";
    t.push_back({p + "attn_norm.weight", f32(c.dim), 1});
    t.push_back({p + "attn_q.weight", f32(q_dim * c.dim), q_dim});
    t.push_back({p + "attn_k.weight", f32(kv_dim * c.dim), kv_dim});
    t.push_back({p + "attn_v.weight", f32(kv_dim * c.dim), kv_dim});
    t.push_back({p + "attn_output.weight", f32(q_dim * c.dim), c.dim});
    t.push_back({p + "ffn_norm.weight", f32(c.dim), 1});
    t.push_back({p + "ffn_gate.weight", f32(int64_t{c.hidden_dim} * c.dim), c.hidden_dim});
    t.push_back({p + "ffn_up.weight", f32(int64_t{c.hidden_dim} * c.dim), c.hidden_dim});
    t.push_back({p + "ffn_down.weight", f32(int64_t{c.hidden_dim} * c.dim), c.dim});
  }
  return t;
}

}  // namespace

std::size_t decode_weight_bytes(const std::vector<WeightTensorSize>& tensors) {
  const WeightTensorSize* embedding = nullptr;
  bool has_classifier = false;
  std::size_t total = 0;
  for (const auto& t : tensors) {
    if (t.name == kEmbedding) {
      embedding = &t;
      continue;
    }
    if (t.name == kClassifier) has_classifier = true;
    total += t.nbytes;
  }
  if (embedding == nullptr) {
    throw base::InvalidArgument(std::string("decode weight bytes: no '") + kEmbedding + "' tensor among " +
                                std::to_string(tensors.size()));
  }
  const int64_t rows = embedding->rows > 0 ? embedding->rows : 1;
  total += has_classifier ? embedding->nbytes / static_cast<std::size_t>(rows) : embedding->nbytes;
  return total;
}

std::size_t decode_weight_bytes_of_file(const std::string& model_path, const lm::ModelConfig& config) {
  if (!lm::gguf::GgufFile::has_magic(model_path)) return decode_weight_bytes(llama2c_tensors(config));
  const auto file = lm::gguf::GgufFile::open(model_path);
  std::vector<WeightTensorSize> tensors;
  for (const auto& info : file->tensors()) {
    // GGUF lists the contiguous dimension first: the rows are the outermost non-trivial one.
    const int64_t rows = info.ne.size() >= 2 ? info.ne[1] : 1;
    tensors.push_back({info.name, info.nbytes, rows});
  }
  return decode_weight_bytes(tensors);
}

DecodeTraffic decode_traffic(std::size_t weight_bytes, std::size_t kv_bytes, double seconds_per_token,
                             double probe_bytes_per_s) {
  DecodeTraffic t;
  t.weight_bytes = weight_bytes;
  t.kv_bytes = kv_bytes;
  t.seconds_per_token = seconds_per_token;
  if (seconds_per_token > 0) t.bytes_per_s = static_cast<double>(weight_bytes + kv_bytes) / seconds_per_token;
  if (probe_bytes_per_s > 0) t.probe_share = t.bytes_per_s / probe_bytes_per_s;
  return t;
}

}  // namespace veloxquant::eval
