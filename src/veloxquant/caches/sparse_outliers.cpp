#include "veloxquant/caches/sparse_outliers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "base/error.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {

// The lower median of v (sorted copy's element (n - 1) / 2): deterministic for even counts.
float lower_median(std::vector<float>& v) {
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>((v.size() - 1) / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace

void isolate_outliers(float* x, int64_t rows, int64_t dim, bool per_channel, int64_t group, const uint8_t* excluded,
                      int64_t k, uint32_t* indices, float* exact) {
  if (k <= 0) return;
  const int64_t n = rows * dim;
  // Each element's quantization group as (first element, count, stride): its median and MAD.
  std::vector<float> center(static_cast<std::size_t>(n)), z(static_cast<std::size_t>(n));
  std::vector<float> members, deviations;
  const auto score_group = [&](int64_t first, int64_t count, int64_t stride) {
    members.clear();
    for (int64_t i = 0; i < count; ++i) members.push_back(x[first + i * stride]);
    const float med = lower_median(members);
    deviations.clear();
    for (int64_t i = 0; i < count; ++i) deviations.push_back(std::fabs(x[first + i * stride] - med));
    const float mad = lower_median(deviations);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t e = first + i * stride;
      center[static_cast<std::size_t>(e)] = med;
      const float dev = std::fabs(x[e] - med);
      // A group with MAD 0 (mostly equal values) ranks any deviation above every finite score.
      z[static_cast<std::size_t>(e)] = mad > 0.0f ? dev / mad : (dev > 0.0f ? INFINITY : 0.0f);
    }
  };
  if (per_channel) {
    for (int64_t c = 0; c < dim; ++c) score_group(c, rows, dim);
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c0 = 0; c0 < dim; c0 += group) score_group(r * dim + c0, std::min(group, dim - c0), 1);
    }
  }
  std::vector<uint32_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0u);
  const auto rank_key = [&](uint32_t e) {
    const bool out = excluded != nullptr && excluded[e / static_cast<uint32_t>(dim)] != 0;
    return std::pair<int, float>{out ? 0 : 1, z[e]};
  };
  const int64_t take = std::min(k, n);
  std::partial_sort(order.begin(), order.begin() + take, order.end(), [&](uint32_t a, uint32_t b) {
    const auto ka = rank_key(a), kb = rank_key(b);
    if (ka != kb) return ka > kb;
    return a < b;
  });
  std::sort(order.begin(), order.begin() + take);
  for (int64_t i = 0; i < k; ++i) {
    // k > n cannot happen for fractions below 1 (validated), but keep the slots well defined.
    const uint32_t e = order[static_cast<std::size_t>(std::min(i, take - 1))];
    indices[i] = e;
    exact[i] = x[e];
  }
  for (int64_t i = 0; i < take; ++i) x[indices[i]] = center[indices[i]];
}

void SparseOutliers::allocate(int64_t batch, int64_t heads, int64_t group, int64_t key_dim, int64_t value_dim) {
  if (!enabled()) return;
  group_ = group;
  key_dim_ = key_dim;
  value_dim_ = value_dim;
  k_keys_ = static_cast<int64_t>(std::llround(fraction_ * static_cast<double>(group * key_dim)));
  k_values_ = static_cast<int64_t>(std::llround(fraction_ * static_cast<double>(group * value_dim)));
  key_index_ = lm::Tensor({batch, heads, 0, k_keys_}, lm::DType::U32);
  key_delta_ = lm::Tensor({batch, heads, 0, k_keys_}, lm::DType::F32);
  value_index_ = lm::Tensor({batch, heads, 0, k_values_}, lm::DType::U32);
  value_delta_ = lm::Tensor({batch, heads, 0, k_values_}, lm::DType::F32);
}

void SparseOutliers::reserve(int64_t filled, int64_t capacity) {
  if (!enabled()) return;
  key_index_ = cache_rows::copy_rows(key_index_, filled, capacity);
  key_delta_ = cache_rows::copy_rows(key_delta_, filled, capacity);
  value_index_ = cache_rows::copy_rows(value_index_, filled, capacity);
  value_delta_ = cache_rows::copy_rows(value_delta_, filled, capacity);
}

void SparseOutliers::record(bool keys, int64_t b, int64_t h, int64_t block, const uint32_t* indices, const float* exact,
                            const float* decoded) {
  const int64_t k = per_block(keys);
  uint32_t* idx = row_ptr<uint32_t>(keys ? key_index_ : value_index_, b, h, block);
  float* delta = row_ptr<float>(keys ? key_delta_ : value_delta_, b, h, block);
  for (int64_t i = 0; i < k; ++i) {
    idx[i] = indices[i];
    delta[i] = exact[i] - decoded[indices[i]];
  }
}

void SparseOutliers::copy_block(const SparseOutliers& source, int64_t from, int64_t to) {
  if (!enabled()) return;
  const lm::Tensor* src[] = {&source.key_index_, &source.key_delta_, &source.value_index_, &source.value_delta_};
  lm::Tensor* dst[] = {&key_index_, &key_delta_, &value_index_, &value_delta_};
  for (int i = 0; i < 4; ++i) {
    const std::size_t bytes = static_cast<std::size_t>(src[i]->dim(3)) * src[i]->element_size();
    for (int64_t b = 0; b < src[i]->dim(0); ++b) {
      for (int64_t h = 0; h < src[i]->dim(1); ++h) {
        const auto& ds = dst[i]->strides();
        const auto& ss = src[i]->strides();
        const int64_t esize = static_cast<int64_t>(src[i]->element_size());
        std::memmove(dst[i]->raw_data() + (b * ds[0] + h * ds[1] + to * ds[2]) * esize,
                     src[i]->raw_data() + (b * ss[0] + h * ss[1] + from * ss[2]) * esize, bytes);
      }
    }
  }
}

void SparseOutliers::apply(bool keys, int64_t b, int64_t h, int64_t begin, int64_t end, float* out) const {
  const int64_t dim = keys ? key_dim_ : value_dim_;
  for_each(keys, b, h, begin, end,
           [&](int64_t row, int64_t channel, float delta) { out[(row - begin) * dim + channel] += delta; });
}

const uint32_t* SparseOutliers::indices(bool keys, int64_t b, int64_t h, int64_t block) const {
  return row_ptr<uint32_t>(keys ? key_index_ : value_index_, b, h, block);
}

const float* SparseOutliers::deltas(bool keys, int64_t b, int64_t h, int64_t block) const {
  return row_ptr<float>(keys ? key_delta_ : value_delta_, b, h, block);
}

std::size_t SparseOutliers::nbytes() const {
  return key_index_.storage_bytes() + key_delta_.storage_bytes() + value_index_.storage_bytes() +
         value_delta_.storage_bytes();
}

std::vector<lm::Tensor> SparseOutliers::state(int64_t blocks) const {
  return {key_index_.slice(2, 0, blocks), key_delta_.slice(2, 0, blocks), value_index_.slice(2, 0, blocks),
          value_delta_.slice(2, 0, blocks)};
}

void SparseOutliers::from_state(const std::vector<lm::Tensor>& tensors, std::size_t first, int64_t blocks,
                                const char* who) {
  if (tensors.size() < first + 4) throw base::FormatError(std::string(who) + ": outlier tensors missing");
  const lm::Tensor* t = tensors.data() + first;
  const int64_t widths[] = {k_keys_, k_keys_, k_values_, k_values_};
  const lm::DType types[] = {lm::DType::U32, lm::DType::F32, lm::DType::U32, lm::DType::F32};
  for (int i = 0; i < 4; ++i) {
    if (t[i].ndim() != 4 || t[i].dim(2) != blocks || t[i].dim(3) != widths[i] || t[i].dtype() != types[i]) {
      throw base::FormatError(std::string(who) + ": outlier tensor " + std::to_string(i) + " does not match " +
                              std::to_string(blocks) + " blocks of " + std::to_string(widths[i]));
    }
  }
  key_index_ = cache_rows::copy_rows(t[0], blocks, blocks);
  key_delta_ = cache_rows::copy_rows(t[1], blocks, blocks);
  value_index_ = cache_rows::copy_rows(t[2], blocks, blocks);
  value_delta_ = cache_rows::copy_rows(t[3], blocks, blocks);
  for (int64_t i = 0; i < key_index_.numel(); ++i) {
    if (key_index_.data<uint32_t>()[i] >= static_cast<uint64_t>(group_ * key_dim_)) {
      throw base::FormatError(std::string(who) + ": key outlier index out of its block");
    }
  }
  for (int64_t i = 0; i < value_index_.numel(); ++i) {
    if (value_index_.data<uint32_t>()[i] >= static_cast<uint64_t>(group_ * value_dim_)) {
      throw base::FormatError(std::string(who) + ": value outlier index out of its block");
    }
  }
}

SparseOutliers SparseOutliers::deep_copy() const {
  SparseOutliers copy = *this;
  if (!key_index_.defined()) return copy;
  copy.key_index_ = key_index_.clone();
  copy.key_delta_ = key_delta_.clone();
  copy.value_index_ = value_index_.clone();
  copy.value_delta_ = value_delta_.clone();
  return copy;
}

}  // namespace veloxquant
