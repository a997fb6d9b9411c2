#pragma once
// Per-position metrics between next-token distributions, all in double precision.
//
// Why double: a KL divergence of 1e-5 nats (what an 8-bit KV cache costs, llama.cpp PR #7412)
// is a difference of two sums of ~vocab_size terms each near log(vocab); float accumulation
// over 49k terms has an error of the same order, so the figure would be noise.
#include <cstdint>
#include <span>
#include <vector>

namespace veloxquant::eval {

// log p_i = x_i - max - log(sum_j exp(x_j - max)), computed in double. `out` is resized to
// logits.size(). Throws base::InvalidArgument on an empty row.
void log_softmax(std::span<const float> logits, std::vector<double>& out);

// log p(token) under softmax(logits). Throws base::InvalidArgument when token is out of range.
double token_log_prob(std::span<const float> logits, int32_t token);

// KL(P || Q) = sum_i p_i (log p_i - log q_i) with P = softmax(reference_logits) (the baseline)
// and Q = softmax(candidate_logits) (the method). Never negative up to rounding; clamped at 0.
// Rows must have the same non-zero length (base::InvalidArgument otherwise).
double kl_divergence(std::span<const float> reference_logits, std::span<const float> candidate_logits);

// Index of the largest logit; the lowest index wins ties (what greedy decoding picks).
int32_t argmax(std::span<const float> logits);

}  // namespace veloxquant::eval
