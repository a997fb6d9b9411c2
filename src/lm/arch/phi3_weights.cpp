#include "lm/arch/phi3_weights.h"

#include <vector>

#include "base/error.h"
#include "lm/weights/float_tensor.h"

namespace lm {

namespace {

// Rows [first, first + count) of `w`: the same bytes, a shorter view.
WeightMatrix row_range(const WeightMatrix& w, int64_t first, int64_t count) {
  WeightMatrix out = w;
  out.data = w.data + static_cast<std::size_t>(first) * w.row_bytes;
  out.rows = count;
  return out;
}

}  // namespace

void read_phi3_layer(const gguf::GgufFile& file, const ModelConfig& c, const std::string& prefix,
                     LlamaLayerWeights& lw) {
  const auto fail = [&](const std::string& name, int64_t rows, int64_t want, const std::string& what) {
    return base::FormatError("GGUF file '" + file.path() + "': tensor '" + name + "' has " + std::to_string(rows) +
                             " rows, expected " + std::to_string(want) + " (" + what + ")");
  };
  const int64_t q_dim = int64_t{c.n_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{c.n_kv_heads} * c.head_dim;
  const std::string qkv_name = prefix + "attn_qkv.weight";
  const WeightMatrix qkv = file.weight(qkv_name);
  if (qkv.rows != q_dim + 2 * kv_dim) throw fail(qkv_name, qkv.rows, q_dim + 2 * kv_dim, "Q + K + V");
  lw.wq = row_range(qkv, 0, q_dim);
  lw.wk = row_range(qkv, q_dim, kv_dim);
  lw.wv = row_range(qkv, q_dim + kv_dim, kv_dim);

  const std::string up_name = prefix + "ffn_up.weight";
  const WeightMatrix gate_up = file.weight(up_name);
  if (gate_up.rows != 2 * int64_t{c.hidden_dim})
    throw fail(up_name, gate_up.rows, 2 * int64_t{c.hidden_dim}, "gate + up");
  lw.w_gate = row_range(gate_up, 0, c.hidden_dim);
  lw.w_up = row_range(gate_up, c.hidden_dim, c.hidden_dim);

  lw.attn_norm = read_float_tensor(file, prefix + "attn_norm.weight");
  lw.wo = file.weight(prefix + "attn_output.weight");
  lw.ffn_norm = read_float_tensor(file, prefix + "ffn_norm.weight");
  lw.w_down = file.weight(prefix + "ffn_down.weight");
}

void check_phi3_supported(const gguf::GgufFile& file) {
  for (const char* name : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
    if (file.find_tensor(name)) {
      throw base::Unsupported("GGUF file '" + file.path() + "': LongRoPE factors ('" + name +
                              "', 128k-context Phi-3 / Phi-3.5 / Phi-4-mini) are not supported");
    }
  }
}

}  // namespace lm
