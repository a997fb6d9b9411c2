#pragma once
// The standalone cache interface (spec §2.4): the research quantizers' own single-vector ABC
// — append a key / a value of shape (d,), attend one query, memory_bytes, reset, size. These
// caches do not implement the host's update_and_fetch contract and are refused by for_model
// and the patches (STANDALONE_METHODS); KVCacheBuilder::build() still makes them.
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace veloxquant {

class StandaloneCache {
 public:
  virtual ~StandaloneCache() = default;

  // One key / one value vector of length head_dim(); throws QuantizerConfigError on a wrong
  // length. A token is complete once both its key and its value were appended.
  virtual void append_key(std::span<const float> key) = 0;
  virtual void append_value(std::span<const float> value) = 0;
  void append(std::span<const float> key, std::span<const float> value) {
    append_key(key);
    append_value(value);
  }

  // softmax(<q, k_i> estimates / sqrt(d)) weighted sum of the dequantized values; zeros when
  // the cache holds no complete token.
  virtual std::vector<float> attend(std::span<const float> query) const = 0;

  // Bytes really allocated for token storage, codes, scales, norms and calibration.
  virtual std::size_t memory_bytes() const = 0;
  // Drops every token; keeps calibration (spectral's PCA basis, outlier channel choice).
  virtual void reset() = 0;
  // Complete tokens held (at most the capacity: the oldest slot is overwritten when full).
  virtual std::size_t size() const = 0;

  virtual int head_dim() const = 0;
  virtual std::string method() const = 0;
};

}  // namespace veloxquant
