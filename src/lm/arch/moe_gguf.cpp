#include "lm/arch/moe_gguf.h"

#include <vector>

#include "base/error.h"

namespace lm {

namespace {

// llama.cpp's enum llama_expert_gating_func_type: 1 = softmax (what qwen3moe uses).
constexpr int64_t kGatingSoftmax = 1;

// The n_experts matrices of a 3-D expert tensor [cols, rows, n_experts] (ne order), each a
// view at e * rows * row_bytes: a quantized row is a whole number of blocks, so expert
// matrices are contiguous and block-aligned one after another.
std::vector<WeightMatrix> expert_views(const gguf::GgufFile& file, const std::string& name, int64_t n_experts,
                                       int64_t rows, int64_t cols) {
  const gguf::TensorInfo& t = file.tensor(name);
  const auto fail = [&](const std::string& what) {
    return base::FormatError("GGUF file '" + file.path() + "': tensor '" + name + "' " + what);
  };
  std::vector<int64_t> ne = t.ne;
  while (ne.size() > 3 && ne.back() == 1) ne.pop_back();
  if (ne.size() != 3 || ne[0] != cols || ne[1] != rows || ne[2] != n_experts) {
    std::string shape;
    for (std::size_t d = 0; d < t.ne.size(); ++d) shape += (d ? ", " : "") + std::to_string(t.ne[d]);
    throw fail("has shape [" + shape + "], expected [" + std::to_string(cols) + ", " + std::to_string(rows) + ", " +
               std::to_string(n_experts) + "]");
  }
  std::vector<WeightMatrix> views;
  views.reserve(static_cast<std::size_t>(n_experts));
  const std::byte* base = file.tensor_data(t);
  for (int64_t e = 0; e < n_experts; ++e) {
    const std::string label = name + " (expert " + std::to_string(e) + ")";
    WeightMatrix w = WeightMatrix::view(t.type, rows, cols, nullptr, file.mapping(), label);
    w.data = base + static_cast<std::size_t>(e) * w.nbytes();
    views.push_back(std::move(w));
  }
  if (static_cast<std::size_t>(n_experts) * views.front().nbytes() != t.nbytes) {
    throw fail("holds " + std::to_string(t.nbytes) + " bytes, not " + std::to_string(n_experts) + " experts of " +
               std::to_string(views.front().nbytes()));
  }
  return views;
}

}  // namespace

// qwen3moe; llama with experts is Mixtral's GGUF layout (same routing: softmax, top-k,
// renormalised; llama.cpp's llama graph renormalises always).
bool moe_architecture_supported(const std::string& arch) { return arch == "qwen3moe" || arch == "llama"; }

std::shared_ptr<const MoeLayerWeights> load_moe_layer(const gguf::GgufFile& file, const std::string& arch,
                                                      const std::string& block_prefix) {
  const std::string p = arch + ".";
  const auto fail = [&](const std::string& what) {
    return base::FormatError("GGUF file '" + file.path() + "': " + what);
  };
  const auto positive = [&](const std::string& key) {
    const int64_t v = file.require_int(p + key);
    if (v <= 0 || v > (int64_t{1} << 30))
      throw fail("metadata '" + p + key + "' = " + std::to_string(v) + " is out of range");
    return v;
  };
  const int64_t n_experts = positive("expert_count");
  const int64_t n_used = positive("expert_used_count");
  if (n_used > n_experts) {
    throw fail(p + "expert_used_count " + std::to_string(n_used) + " exceeds " + p + "expert_count " +
               std::to_string(n_experts));
  }
  if (auto gating = file.get_int(p + "expert_gating_func"); gating && *gating != kGatingSoftmax) {
    throw base::Unsupported("GGUF file '" + file.path() + "': expert gating function " + std::to_string(*gating) +
                            " is not supported (only softmax, 1)");
  }
  if (auto scale = file.get_float(p + "expert_weights_scale"); scale && *scale != 0.0 && *scale != 1.0) {
    throw base::Unsupported("GGUF file '" + file.path() + "': " + p + "expert_weights_scale " + std::to_string(*scale) +
                            " is not supported (only 1)");
  }
  if (file.find_tensor(block_prefix + "ffn_gate_shexp.weight")) {
    throw base::Unsupported("GGUF file '" + file.path() + "': shared experts (" + block_prefix +
                            "ffn_gate_shexp.weight) are not supported");
  }

  if (!file.find_tensor(block_prefix + "ffn_gate_exps.weight") &&
      file.find_tensor(block_prefix + "ffn_gate.0.weight")) {
    throw base::Unsupported("GGUF file '" + file.path() + "': experts stored one tensor each (" + block_prefix +
                            "ffn_gate.0.weight, the pre-2024 Mixtral layout) are not supported; re-convert the "
                            "model with a current convert_hf_to_gguf.py (stacked ffn_*_exps tensors)");
  }

  auto w = std::make_shared<MoeLayerWeights>();
  w->router = file.weight(block_prefix + "ffn_gate_inp.weight");
  const int64_t dim = w->router.cols;
  // expert_feed_forward_length is what converters write; without it, the tensor says.
  const gguf::TensorInfo& gate_info = file.tensor(block_prefix + "ffn_gate_exps.weight");
  const int64_t ffn = file.find(p + "expert_feed_forward_length") ? positive("expert_feed_forward_length")
                      : gate_info.ne.size() > 1                   ? gate_info.ne[1]
                                                                  : 0;
  auto gate = expert_views(file, block_prefix + "ffn_gate_exps.weight", n_experts, ffn, dim);
  auto up = expert_views(file, block_prefix + "ffn_up_exps.weight", n_experts, ffn, dim);
  auto down = expert_views(file, block_prefix + "ffn_down_exps.weight", n_experts, dim, ffn);
  w->experts.resize(static_cast<std::size_t>(n_experts));
  for (int64_t e = 0; e < n_experts; ++e) {
    w->experts[e] = MoeExpert{std::move(gate[e]), std::move(up[e]), std::move(down[e])};
  }
  w->n_used = static_cast<int>(n_used);
  w->normalize = file.get_bool(p + "expert_weights_norm").value_or(true);
  return w;
}

}  // namespace lm
