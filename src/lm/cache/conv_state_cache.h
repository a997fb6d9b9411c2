#pragma once
// lm::ConvStateCache — the recurrent state of a short-convolution layer (LFM2's gated conv
// blocks), which has no keys or values: the last L-1 inputs of its causal depthwise
// convolution (L = kernel size, lfm2.shortconv.l_cache), one row of `channels` floats each,
// oldest first. It is such a layer's native cache; KVCacheBuilder::for_model leaves it in
// place under every method (spec §4.2 step 3), since there is nothing to quantize or evict.
//
// It implements the whole cache contract so that it travels with the other layers' caches
// (generation, prompt-cache files, per-request clones); the attention members refuse to run.
// Not trimmable: rolling back n tokens would need the n inputs that left the window.
#include "lm/cache/cache.h"

namespace lm {

class ConvStateCache : public KVCache {
 public:
  // base::InvalidArgument unless channels >= 1 and kernel_size >= 2 (a window of at least one
  // past input; LFM2 uses 3).
  ConvStateCache(int64_t channels, int64_t kernel_size);

  // Runs the layer's convolution over `n` new inputs ([n][channels]) with tap-major weights
  // ([kernel_size][channels], see lm/kernels/causal_conv1d.h), writes [n][channels] into
  // `out`, then keeps the last kernel_size-1 inputs as the state.
  void convolve(const float* input, int64_t n, const float* taps, float* out);

  int64_t channels() const { return channels_; }
  int64_t kernel_size() const { return kernel_size_; }
  // [kernel_size-1][channels], oldest first; zeros before the first token (torch's padding).
  const std::vector<float>& history() const { return history_; }

  // Not an attention cache: base::InvalidArgument naming the class.
  KeysValues update_and_fetch(const Tensor& keys, const Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override { return history_.size() * sizeof(float); }
  // state() = {history as an f32 tensor [kernel_size-1, channels]}; meta_state() = {channels,
  // kernel_size, offset}. from_state restores all three (base::FormatError on a mismatch).
  std::vector<Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "ConvStateCache"; }
  std::shared_ptr<KVCache> clone() const override;

 private:
  int64_t channels_;
  int64_t kernel_size_;
  std::vector<float> history_;
  int64_t offset_ = 0;
};

}  // namespace lm
