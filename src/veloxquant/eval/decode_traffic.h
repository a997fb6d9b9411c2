#pragma once
// The bytes one decode step reads, and the rate they were read at: the yardstick for "attention
// at memory speed". A single-token decode step streams every weight matrix once (the matmuls
// are matrix-vector products) and attention reads what the caches hold; at long context the
// second term dominates, which is why a cache 4x smaller can decode faster.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lm/model.h"

namespace veloxquant::eval {

// One weight tensor as the file stores it.
struct WeightTensorSize {
  std::string name;  // GGUF name: "token_embd.weight", "output.weight", "blk.0.attn_q.weight", ...
  std::size_t nbytes = 0;
  int64_t rows = 1;  // outermost dimension (the vocabulary for the embedding)
};

// Weight bytes a decode step reads, from the tensors' stored sizes: every tensor once, except
// the token embedding, of which the lookup reads one row (nbytes / rows) -- unless there is
// no "output.weight", in which case the embedding is also the (tied) classifier and is read
// whole. Throws base::InvalidArgument when the embedding tensor is missing.
std::size_t decode_weight_bytes(const std::vector<WeightTensorSize>& tensors);

// decode_weight_bytes of a model file: its GGUF tensor sizes, or for a llama2.c checkpoint
// (f32 throughout) the sizes its config implies. Throws the loader's errors for a bad file.
std::size_t decode_weight_bytes_of_file(const std::string& model_path, const lm::ModelConfig& config);

struct DecodeTraffic {
  std::size_t weight_bytes = 0;  // per token
  std::size_t kv_bytes = 0;      // per token: the caches' nbytes() at the row's context
  double seconds_per_token = 0.0;
  double bytes_per_s = 0.0;  // (weight_bytes + kv_bytes) / seconds_per_token
  double probe_share = 0.0;  // bytes_per_s / the probe's streaming-read rate (0 = no probe)
};

// The arithmetic above, in one place. Zero or negative seconds give bytes_per_s 0 (no
// decode measured); a probe rate <= 0 gives probe_share 0.
DecodeTraffic decode_traffic(std::size_t weight_bytes, std::size_t kv_bytes, double seconds_per_token,
                             double probe_bytes_per_s);

}  // namespace veloxquant::eval
