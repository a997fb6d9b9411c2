#pragma once
// The mixture-of-experts FFN of qwen3moe and Mixtral: a router scores every expert for each token, the k
// best (by softmax probability) run their SwiGLU FFN on that token only, and the token's output
// is the probability-weighted sum of those k outputs.
//
// Semantics follow transformers' Qwen3MoeSparseMoeBlock (modeling_qwen3_moe.py; MixtralSparseMoeBlock
// is the same with the renormalisation always on):
//   probs = softmax(router_logits) in f32 over all E experts; take the top k of probs;
//   when norm_topk_prob, divide those k by their sum; out = sum_j w_j * down_j(silu(gate_j x) * up_j x),
// accumulated over the selected experts in increasing expert index (index_add_ per expert).
//
// Cost: only the selected experts' rows are multiplied. In prefill the tokens routed to an
// expert are gathered into one contiguous batch so each expert's matrices are read once per
// layer (the prefill matmul path reuses each dequantized weight row across the batch); in
// decode only the k chosen experts run, their gate/up products in one thread-pool hand-off.
#include <cstdint>
#include <string>
#include <vector>

#include "lm/kernels/matmul.h"
#include "lm/weights/weight_matrix.h"

namespace base {
class ThreadPool;
}

namespace lm {

// One expert: views into the 3-D GGUF tensors ffn_{gate,up,down}_exps (expert e's matrix
// starts e * rows * row_bytes into the tensor, which holds for block types as well since a
// row is a whole number of blocks).
struct MoeExpert {
  WeightMatrix gate, up;  // [expert_ffn rows, dim cols]
  WeightMatrix down;      // [dim rows, expert_ffn cols]
};

struct MoeLayerWeights {
  WeightMatrix router;             // ffn_gate_inp: [n_experts rows, dim cols]
  std::vector<MoeExpert> experts;  // n_experts of them
  int n_used = 0;                  // k: experts per token (expert_used_count)
  bool normalize = true;           // norm_topk_prob: the k weights are rescaled to sum to 1
};

// Throws base::FormatError naming the tensor (prefix "blk.N.") whose shape disagrees with
// dim, or a k outside [1, n_experts].
void validate_moe_layer(const MoeLayerWeights& w, int64_t dim, const std::string& prefix);

// Routing of n_tokens tokens from their router logits [n_tokens, n_experts]: writes the k
// selected experts of token t to experts[t*k ..] in decreasing probability (ties: lower index
// first) and their weights to weights[t*k ..] (softmax probabilities, renormalised over the
// k when `normalize`).
void route_tokens(const float* router_logits, int64_t n_tokens, int n_experts, int k, bool normalize, int32_t* experts,
                  float* weights);

// out[t, :] = the MoE FFN of x[t, :] for t in [0, n_tokens); x and out are [n_tokens, dim]
// row-major and must not alias. The matmuls use lm::kernels (threaded over output rows, so
// the result does not depend on the thread count).
void moe_ffn(const MoeLayerWeights& w, const float* x, int64_t n_tokens, float* out, base::ThreadPool* pool,
             kernels::Activations activations);

// The same function, token by token and expert by expert, from dequantized rows with sums in
// double: the plain reference the tests compare moe_ffn to.
void moe_ffn_reference(const MoeLayerWeights& w, const float* x, int64_t n_tokens, float* out);

}  // namespace lm
