#include "lm/arch/moe_ffn.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.h"
#include "lm/kernels/elementwise.h"

namespace lm {

namespace {

void expect_shape(const WeightMatrix& w, int64_t rows, int64_t cols, const std::string& name) {
  if (w.rows != rows || w.cols != cols) {
    throw base::FormatError("tensor '" + name + "' has shape [" + std::to_string(w.cols) + ", " +
                            std::to_string(w.rows) + "] (cols, rows), expected [" + std::to_string(cols) + ", " +
                            std::to_string(rows) + "]");
  }
}

float* sized(std::vector<float>& buffer, int64_t n) {
  if (buffer.size() < static_cast<std::size_t>(n)) buffer.resize(static_cast<std::size_t>(n));
  return buffer.data();
}

// moe_ffn's working buffers: grown, never shrunk, so that decode steps do not allocate once
// the first step has sized them. Per thread, as forward() may run on several threads.
struct MoeScratch {
  std::vector<float> logits, weights, gathered, gate, up, expert_out;
  std::vector<int32_t> experts;
  std::vector<std::vector<int64_t>> slots_of_expert;  // slot = t * k + j
  std::vector<int64_t> order;
};

MoeScratch& scratch() {
  thread_local MoeScratch s;
  return s;
}

// The k slots of one token in increasing expert index: the order in which transformers'
// per-expert index_add_ accumulates them.
void slots_by_expert(const int32_t* experts, int k, int64_t* order) {
  std::iota(order, order + k, int64_t{0});
  std::sort(order, order + k, [&](int64_t a, int64_t b) { return experts[a] < experts[b]; });
}

// "<prefix><name> (expert e)": the name an expert's shape error reports.
std::string expert_tensor_name(const std::string& prefix, const char* name, std::size_t e) {
  std::string out = prefix;
  out += name;
  out += " (expert ";
  out += std::to_string(e);
  out += ")";
  return out;
}

}  // namespace

void validate_moe_layer(const MoeLayerWeights& w, int64_t dim, const std::string& prefix) {
  const int64_t n_experts = static_cast<int64_t>(w.experts.size());
  if (n_experts == 0) throw base::FormatError("layer '" + prefix + "' has no experts");
  if (w.n_used < 1 || w.n_used > n_experts) {
    throw base::FormatError("layer '" + prefix + "': expert_used_count " + std::to_string(w.n_used) +
                            " must be in [1, " + std::to_string(n_experts) + "]");
  }
  expect_shape(w.router, n_experts, dim, prefix + "ffn_gate_inp.weight");
  const int64_t ffn = w.experts[0].gate.rows;
  for (std::size_t e = 0; e < w.experts.size(); ++e) {
    expect_shape(w.experts[e].gate, ffn, dim, expert_tensor_name(prefix, "ffn_gate_exps.weight", e));
    expect_shape(w.experts[e].up, ffn, dim, expert_tensor_name(prefix, "ffn_up_exps.weight", e));
    expect_shape(w.experts[e].down, dim, ffn, expert_tensor_name(prefix, "ffn_down_exps.weight", e));
  }
}

void route_tokens(const float* router_logits, int64_t n_tokens, int n_experts, int k, bool normalize, int32_t* experts,
                  float* weights) {
  thread_local std::vector<float> probs;
  thread_local std::vector<int32_t> index;
  probs.resize(static_cast<std::size_t>(n_experts));
  index.resize(static_cast<std::size_t>(n_experts));
  for (int64_t t = 0; t < n_tokens; ++t) {
    std::copy_n(router_logits + t * n_experts, n_experts, probs.data());
    kernels::softmax(probs.data(), n_experts);
    std::iota(index.begin(), index.end(), 0);
    std::partial_sort(index.begin(), index.begin() + k, index.end(),
                      [&](int32_t a, int32_t b) { return probs[a] > probs[b] || (probs[a] == probs[b] && a < b); });
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += probs[index[j]];
    for (int j = 0; j < k; ++j) {
      experts[t * k + j] = index[j];
      weights[t * k + j] = normalize ? probs[index[j]] / sum : probs[index[j]];
    }
  }
}

void moe_ffn(const MoeLayerWeights& w, const float* x, int64_t n_tokens, float* out, base::ThreadPool* pool,
             kernels::Activations activations) {
  const int n_experts = static_cast<int>(w.experts.size());
  const int k = w.n_used;
  const int64_t dim = w.router.cols, ffn = w.experts[0].gate.rows;
  const int64_t n_slots = n_tokens * k;
  MoeScratch& s = scratch();

  float* logits = sized(s.logits, n_tokens * n_experts);
  kernels::matmul(w.router, x, n_tokens, logits, pool, activations);
  if (s.experts.size() < static_cast<std::size_t>(n_slots)) s.experts.resize(static_cast<std::size_t>(n_slots));
  float* weights = sized(s.weights, n_slots);
  route_tokens(logits, n_tokens, n_experts, k, w.normalize, s.experts.data(), weights);

  // expert_out[slot] = down_e(swiglu(gate_e x_t, up_e x_t)) for slot = t*k + j, e = experts[slot].
  float* expert_out = sized(s.expert_out, n_slots * dim);
  if (n_tokens == 1) {
    // Decode: the k experts share the one token's activations, so their gate and up products
    // go out together (kMaxMatmulJobs per hand-off); the down products each have their own input.
    float* gate = sized(s.gate, k * ffn);
    float* up = sized(s.up, k * ffn);
    constexpr int kExpertsPerCall = static_cast<int>(kernels::kMaxMatmulJobs / 2);
    for (int j0 = 0; j0 < k; j0 += kExpertsPerCall) {
      kernels::MatmulJob jobs[kernels::kMaxMatmulJobs];
      const int count = std::min(kExpertsPerCall, k - j0);
      for (int j = 0; j < count; ++j) {
        const MoeExpert& e = w.experts[s.experts[j0 + j]];
        kernels::MatmulJob* pair = jobs + static_cast<std::ptrdiff_t>(j) * 2;  // gate then up
        pair[0] = {&e.gate, gate + (j0 + j) * ffn};
        pair[1] = {&e.up, up + (j0 + j) * ffn};
      }
      kernels::matmul_many(std::span<const kernels::MatmulJob>(jobs, static_cast<std::size_t>(count) * 2), x, 1, pool,
                           activations);
    }
    kernels::swiglu(gate, up, k * ffn);
    for (int j = 0; j < k; ++j) {
      kernels::matmul(w.experts[s.experts[j]].down, gate + j * ffn, 1, expert_out + j * dim, pool, activations);
    }
  } else {
    // Prefill: group the slots by expert, gather each expert's tokens into one batch.
    s.slots_of_expert.resize(static_cast<std::size_t>(n_experts));
    for (auto& slots : s.slots_of_expert) slots.clear();
    for (int64_t slot = 0; slot < n_slots; ++slot) s.slots_of_expert[s.experts[slot]].push_back(slot);
    for (int e = 0; e < n_experts; ++e) {
      const std::vector<int64_t>& slots = s.slots_of_expert[e];
      const int64_t m = static_cast<int64_t>(slots.size());
      if (m == 0) continue;
      float* gathered = sized(s.gathered, m * std::max(dim, ffn));
      float* gate = sized(s.gate, m * ffn);
      float* up = sized(s.up, m * ffn);
      for (int64_t i = 0; i < m; ++i) std::copy_n(x + (slots[i] / k) * dim, dim, gathered + i * dim);
      const MoeExpert& ex = w.experts[e];
      const kernels::MatmulJob jobs[] = {{&ex.gate, gate}, {&ex.up, up}};
      kernels::matmul_many(jobs, gathered, m, pool, activations);
      kernels::swiglu(gate, up, m * ffn);
      kernels::matmul(ex.down, gate, m, gathered, pool, activations);  // gathered is free again: m x dim out
      for (int64_t i = 0; i < m; ++i) std::copy_n(gathered + i * dim, dim, expert_out + slots[i] * dim);
    }
  }

  // Weighted sum per token, over its experts in increasing index (transformers' order).
  if (s.order.size() < static_cast<std::size_t>(k)) s.order.resize(static_cast<std::size_t>(k));
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* o = out + t * dim;
    std::fill_n(o, dim, 0.0f);
    slots_by_expert(s.experts.data() + t * k, k, s.order.data());
    for (int j = 0; j < k; ++j) {
      const int64_t slot = t * k + s.order[j];
      const float wt = weights[slot];
      const float* eo = expert_out + slot * dim;
      for (int64_t i = 0; i < dim; ++i) o[i] += wt * eo[i];
    }
  }
}

void moe_ffn_reference(const MoeLayerWeights& w, const float* x, int64_t n_tokens, float* out) {
  const int n_experts = static_cast<int>(w.experts.size());
  const int k = w.n_used;
  const int64_t dim = w.router.cols, ffn = w.experts[0].gate.rows;
  std::vector<float> row(static_cast<std::size_t>(std::max(dim, ffn)));
  const auto dot = [&](const WeightMatrix& m, int64_t r, const float* v) {
    m.dequantize_row_to(r, row.data());
    double acc = 0.0;
    for (int64_t i = 0; i < m.cols; ++i) acc += static_cast<double>(row[i]) * v[i];
    return acc;
  };
  std::vector<float> logits(static_cast<std::size_t>(n_experts)), weights(static_cast<std::size_t>(k));
  std::vector<int32_t> experts(static_cast<std::size_t>(k));
  std::vector<float> hidden(static_cast<std::size_t>(ffn));
  std::vector<double> acc(static_cast<std::size_t>(dim));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * dim;
    for (int e = 0; e < n_experts; ++e) logits[e] = static_cast<float>(dot(w.router, e, xt));
    route_tokens(logits.data(), 1, n_experts, k, w.normalize, experts.data(), weights.data());
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int j = 0; j < k; ++j) {
      const MoeExpert& ex = w.experts[experts[j]];
      for (int64_t r = 0; r < ffn; ++r) {
        const double g = dot(ex.gate, r, xt), u = dot(ex.up, r, xt);
        hidden[r] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
      }
      for (int64_t r = 0; r < dim; ++r) acc[r] += weights[j] * dot(ex.down, r, hidden.data());
    }
    for (int64_t i = 0; i < dim; ++i) out[t * dim + i] = static_cast<float>(acc[i]);
  }
}

}  // namespace lm
