#include "lm/cache/conv_state_cache.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "lm/kernels/causal_conv1d.h"

namespace lm {

namespace {

int64_t parse_meta_int(const std::string& text, const char* what) {
  std::size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) {
    throw base::FormatError(std::string("ConvStateCache::from_state: ") + what + " '" + text + "' is not an integer");
  }
  return value;
}

}  // namespace

ConvStateCache::ConvStateCache(int64_t channels, int64_t kernel_size) : channels_(channels), kernel_size_(kernel_size) {
  if (channels < 1 || kernel_size < 2 || channels > (int64_t{1} << 24) || kernel_size > 1024) {
    throw base::InvalidArgument("ConvStateCache: channels " + std::to_string(channels) + " and kernel size " +
                                std::to_string(kernel_size) + " must be in [1, 2^24] and [2, 1024]");
  }
  history_.assign(static_cast<std::size_t>((kernel_size - 1) * channels), 0.0f);
}

void ConvStateCache::convolve(const float* input, int64_t n, const float* taps, float* out) {
  if (n <= 0) return;
  kernels::causal_conv1d(history_.data(), input, n, channels_, taps, kernel_size_, out);
  // The new state: the last L-1 rows of history ++ input.
  const int64_t past = kernel_size_ - 1;
  const int64_t from_input = std::min(n, past);
  const int64_t kept = past - from_input;  // rows that stay from the old history
  std::copy(history_.begin() + (past - kept) * channels_, history_.end(), history_.begin());
  std::copy(input + (n - from_input) * channels_, input + n * channels_, history_.begin() + kept * channels_);
  offset_ += n;
}

KeysValues ConvStateCache::update_and_fetch(const Tensor&, const Tensor&) {
  throw base::InvalidArgument(
      "ConvStateCache holds a convolution layer's state, not keys and values: it cannot serve attention");
}

std::vector<Tensor> ConvStateCache::state() const {
  return {Tensor::from_f32(history_, {kernel_size_ - 1, channels_}, DType::F32)};
}

std::vector<std::string> ConvStateCache::meta_state() const {
  return {std::to_string(channels_), std::to_string(kernel_size_), std::to_string(offset_)};
}

void ConvStateCache::from_state(const std::vector<Tensor>& state, const std::vector<std::string>& meta) {
  if (meta.size() != 3) {
    throw base::FormatError(
        "ConvStateCache::from_state: expected 3 meta entries (channels, kernel size, offset), got " +
        std::to_string(meta.size()));
  }
  const int64_t channels = parse_meta_int(meta[0], "channels");
  const int64_t kernel_size = parse_meta_int(meta[1], "kernel size");
  const int64_t offset = parse_meta_int(meta[2], "offset");
  if (offset < 0) throw base::FormatError("ConvStateCache::from_state: negative offset " + meta[2]);
  ConvStateCache restored = [&] {
    try {
      return ConvStateCache(channels, kernel_size);
    } catch (const base::InvalidArgument& e) {
      throw base::FormatError(std::string("ConvStateCache::from_state: ") + e.what());
    }
  }();
  if (state.size() != 1 || state[0].ndim() != 2 || state[0].dim(0) != kernel_size - 1 || state[0].dim(1) != channels) {
    throw base::FormatError("ConvStateCache::from_state: expected one tensor [" + std::to_string(kernel_size - 1) +
                            ", " + std::to_string(channels) + "]");
  }
  restored.history_ = state[0].to_f32();
  restored.offset_ = offset;
  *this = std::move(restored);
}

std::shared_ptr<KVCache> ConvStateCache::clone() const { return std::make_shared<ConvStateCache>(*this); }

}  // namespace lm
