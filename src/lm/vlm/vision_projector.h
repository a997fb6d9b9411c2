#pragma once
// lm::VisionProjector — what maps the vision tower's features into the language model's
// input-embedding space, one implementation per family of connector.
#include <memory>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "lm/weights/weight_matrix.h"

namespace lm {

class VisionProjector {
 public:
  virtual ~VisionProjector() = default;
  virtual std::string kind() const = 0;  // llama.cpp's clip.projector_type ("mlp", ...)
  virtual int input_dim() const = 0;
  virtual int output_dim() const = 0;
  // Rows out for `n` feature rows in.
  virtual int64_t output_tokens(int64_t n) const = 0;
  // features: [n, input_dim] -> [output_tokens(n), output_dim].
  virtual std::vector<float> project(const std::vector<float>& features, int64_t n) const = 0;
};

// LLaVA's connector (llama.cpp 'mlp'): linear (mm.0) -> GELU -> linear (mm.2), one output row
// per patch. GELU in its exact erf form, as transformers' LlavaMultiModalProjector
// ("gelu"); llama.cpp's ggml_gelu is the tanh approximation, within ~1e-3 of it.
class MlpProjector : public VisionProjector {
 public:
  // w2 may be empty (rows == 0): a one-layer projector.
  MlpProjector(WeightMatrix w0, std::vector<float> b0, WeightMatrix w2, std::vector<float> b2,
               std::shared_ptr<base::ThreadPool> pool);
  std::string kind() const override { return "mlp"; }
  int input_dim() const override { return static_cast<int>(w0_.cols); }
  int output_dim() const override { return static_cast<int>(w2_.rows > 0 ? w2_.rows : w0_.rows); }
  int64_t output_tokens(int64_t n) const override { return n; }
  std::vector<float> project(const std::vector<float>& features, int64_t n) const override;

 private:
  WeightMatrix w0_, w2_;
  std::vector<float> b0_, b2_;
  std::shared_ptr<base::ThreadPool> pool_;
};

// Idefics3 / SmolVLM's connector (llama.cpp 'idefics3'): pixel shuffle — each s x s block of
// patch features becomes one row (the block's rows top to bottom, each left to right,
// concatenated), s^2 fewer rows s^2 times as wide — then one linear map without bias
// (mm.model.fc).
class PixelShuffleProjector : public VisionProjector {
 public:
  PixelShuffleProjector(WeightMatrix fc, int scale_factor, int patches_per_side,
                        std::shared_ptr<base::ThreadPool> pool);
  std::string kind() const override { return "idefics3"; }
  int input_dim() const override { return static_cast<int>(fc_.cols) / (scale_ * scale_); }
  int output_dim() const override { return static_cast<int>(fc_.rows); }
  int64_t output_tokens(int64_t n) const override { return n / (int64_t{scale_} * scale_); }
  std::vector<float> project(const std::vector<float>& features, int64_t n) const override;

 private:
  WeightMatrix fc_;
  int scale_;
  int side_;
  std::shared_ptr<base::ThreadPool> pool_;
};

// The shuffle alone (the reference the projector's layout is tested against): features
// [side * side, dim] -> [(side / s)^2, dim * s * s].
std::vector<float> pixel_shuffle(const std::vector<float>& features, int side, int dim, int scale);

}  // namespace lm
