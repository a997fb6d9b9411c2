#include "veloxquant/caches/sink_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/error.h"
#include "base/memory_limit.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

namespace {

// Row `row` of head (b, h) of a [B, H, slots, D] tensor, in bytes (its dtype is the input's).
const std::byte* row_bytes(const lm::Tensor& t, int64_t b, int64_t h, int64_t row) {
  const auto& s = t.strides();
  return t.raw_data() + (b * s[0] + h * s[1] + row * s[2]) * static_cast<int64_t>(t.element_size());
}
std::byte* row_bytes(lm::Tensor& t, int64_t b, int64_t h, int64_t row) {
  const auto& s = t.strides();
  return t.raw_data() + (b * s[0] + h * s[1] + row * s[2]) * static_cast<int64_t>(t.element_size());
}

// The row a sink at i takes its place from: the nearest row of its key group [g0, g1) that is
// not a sink (`sinks` sorted; ties to the earlier row), or -1 when the group holds sinks only.
int64_t nearest_ordinary_row(const std::vector<int64_t>& sinks, int64_t i, int64_t g0, int64_t g1, int64_t group) {
  for (int64_t dist = 1; dist < group; ++dist) {
    for (const int64_t j : {i - dist, i + dist}) {
      if (j >= g0 && j < g1 && !std::binary_search(sinks.begin(), sinks.end(), j)) return j;
    }
  }
  return -1;
}

}  // namespace

const char* sink_rule_name(SinkRule rule) {
  switch (rule) {
    case SinkRule::kNone:
      return "none";
    case SinkRule::kFirstPositions:
      return "first";
    case SinkRule::kTopKeyNorm:
      return "top_key_norm";
  }
  return "none";
}

SinkRule parse_sink_rule(const std::string& name, const char* who) {
  for (SinkRule rule : {SinkRule::kNone, SinkRule::kFirstPositions, SinkRule::kTopKeyNorm}) {
    if (name == sink_rule_name(rule)) return rule;
  }
  throw base::FormatError(std::string(who) + ": unknown sink rule '" + name + "'");
}

void SinkRows::allocate(int64_t batch, int64_t heads, int64_t key_dim, int64_t value_dim, lm::DType dtype) {
  if (!enabled()) return;
  // All slots up front: a clear error instead of std::bad_alloc when they cannot fit.
  base::require_allocatable(
      static_cast<double>(batch) * static_cast<double>(heads) * static_cast<double>(slots_) *
          static_cast<double>(key_dim + value_dim) * static_cast<double>(lm::dtype_size(dtype)),
      std::to_string(slots_) + " exact sink rows (" + std::to_string(batch * heads) + " kv heads, one layer)");
  positions_ = lm::Tensor({batch, slots_}, lm::DType::I32);
  std::fill(positions_.data<int32_t>(), positions_.data<int32_t>() + batch * slots_, -1);
  keys_ = lm::Tensor({batch, heads, slots_, key_dim}, dtype);
  values_ = lm::Tensor({batch, heads, slots_, value_dim}, dtype);
  counts_.assign(static_cast<std::size_t>(batch), 0);
}

void SinkRows::take(std::vector<float>& pk, std::vector<float>& pv, int64_t pending_rows, int64_t first, int64_t rows,
                    int64_t first_position, int64_t group) {
  if (!enabled()) return;
  const int64_t batch = keys_.dim(0), heads = keys_.dim(1), dk = keys_.dim(3), dv = values_.dim(3);
  std::vector<int64_t> chosen;  // pending-relative row indices (0 .. rows)
  std::vector<float> score(static_cast<std::size_t>(rows));
  std::vector<int64_t> order(static_cast<std::size_t>(rows));
  for (int64_t b = 0; b < batch; ++b) {
    int64_t& count = counts_[static_cast<std::size_t>(b)];
    const int64_t free = slots_ - count;
    if (free <= 0) continue;
    chosen.clear();
    if (rule_ == SinkRule::kFirstPositions) {
      for (int64_t i = 0; i < rows && first_position + i < slots_; ++i) chosen.push_back(i);
    } else {
      // Mean key L2 norm over the heads, in double so the ranking does not depend on summation order.
      for (int64_t i = 0; i < rows; ++i) {
        double total = 0.0;
        for (int64_t h = 0; h < heads; ++h) {
          const float* k = pk.data() + ((b * heads + h) * pending_rows + first + i) * dk;
          double sq = 0.0;
          for (int64_t c = 0; c < dk; ++c) sq += double(k[c]) * double(k[c]);
          total += std::sqrt(sq);
        }
        score[static_cast<std::size_t>(i)] = static_cast<float>(total / static_cast<double>(heads));
      }
      std::iota(order.begin(), order.end(), int64_t{0});
      std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
        return score[static_cast<std::size_t>(x)] > score[static_cast<std::size_t>(y)];
      });
      chosen.assign(order.begin(), order.begin() + std::min(free, rows));
      std::sort(chosen.begin(), chosen.end());
    }
    // Store the exact rows (pending holds the input widened to f32, so narrowing back is exact).
    for (std::size_t s = 0; s < chosen.size(); ++s) {
      const int64_t i = chosen[s], slot = count + static_cast<int64_t>(s);
      positions_.data<int32_t>()[b * slots_ + slot] = static_cast<int32_t>(first_position + i);
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t row = (b * heads + h) * pending_rows + first + i;
        cache_rows::store_f32(pk.data() + row * dk, static_cast<std::size_t>(dk), row_bytes(keys_, b, h, slot),
                              keys_.dtype());
        cache_rows::store_f32(pv.data() + row * dv, static_cast<std::size_t>(dv), row_bytes(values_, b, h, slot),
                              values_.dtype());
      }
    }
    // Neutralize: each sink takes the nearest non-sink row of its own key group (ties to the
    // earlier row), so the group's (min, max) only see ordinary rows. A group made of sinks only
    // keeps its rows: none of them is ever read back from the codes.
    for (const int64_t i : chosen) {
      const int64_t g0 = (i / group) * group, g1 = std::min(rows, g0 + group);
      const int64_t source = nearest_ordinary_row(chosen, i, g0, g1, group);
      if (source < 0) continue;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t base = (b * heads + h) * pending_rows + first;
        std::memcpy(pk.data() + (base + i) * dk, pk.data() + (base + source) * dk,
                    sizeof(float) * static_cast<std::size_t>(dk));
        std::memcpy(pv.data() + (base + i) * dv, pv.data() + (base + source) * dv,
                    sizeof(float) * static_cast<std::size_t>(dv));
      }
    }
    count += static_cast<int64_t>(chosen.size());
  }
}

const int32_t* SinkRows::positions(int64_t b) const { return positions_.data<int32_t>() + b * slots_; }

bool SinkRows::is_sink(int64_t b, int64_t position) const {
  if (!enabled() || counts_.empty()) return false;
  const int32_t* p = positions(b);
  return std::binary_search(p, p + count(b), static_cast<int32_t>(position));
}

const std::byte* SinkRows::key_row(int64_t b, int64_t h, int64_t slot) const { return row_bytes(keys_, b, h, slot); }

const std::byte* SinkRows::value_row(int64_t b, int64_t h, int64_t slot) const {
  return row_bytes(values_, b, h, slot);
}

void SinkRows::overlay(const lm::Tensor& rows, int64_t b, int64_t h, int64_t begin, int64_t end, int64_t dim,
                       float* out) const {
  if (!enabled() || counts_.empty()) return;
  const int32_t* p = positions(b);
  for (int64_t s = 0; s < count(b); ++s) {
    if (p[s] < begin || p[s] >= end) continue;
    cache_rows::load_f32(row_bytes(rows, b, h, s), rows.dtype(), static_cast<std::size_t>(dim),
                         out + (p[s] - begin) * dim);
  }
}

void SinkRows::overlay_keys(int64_t b, int64_t h, int64_t begin, int64_t end, float* out) const {
  overlay(keys_, b, h, begin, end, keys_.defined() ? keys_.dim(3) : 0, out);
}

void SinkRows::overlay_values(int64_t b, int64_t h, int64_t begin, int64_t end, float* out) const {
  overlay(values_, b, h, begin, end, values_.defined() ? values_.dim(3) : 0, out);
}

void SinkRows::drop_from(int64_t position) {
  for (std::size_t b = 0; b < counts_.size(); ++b) {
    int32_t* p = positions_.data<int32_t>() + static_cast<int64_t>(b) * slots_;
    while (counts_[b] > 0 && p[counts_[b] - 1] >= position) p[--counts_[b]] = -1;
  }
}

std::size_t SinkRows::nbytes() const {
  return positions_.storage_bytes() + keys_.storage_bytes() + values_.storage_bytes();
}

std::vector<lm::Tensor> SinkRows::state() const { return {positions_, keys_, values_}; }

void SinkRows::from_state(const lm::Tensor& positions, const lm::Tensor& keys, const lm::Tensor& values,
                          const char* who) {
  if (positions.ndim() != 2 || positions.dtype() != lm::DType::I32 || positions.dim(1) != slots_ || keys.ndim() != 4 ||
      values.ndim() != 4 || keys.dim(2) != slots_ || values.dim(2) != slots_ || keys.dim(0) != positions.dim(0) ||
      values.dim(0) != positions.dim(0)) {
    throw base::FormatError(std::string(who) + ": sink tensors do not match " + std::to_string(slots_) + " slots");
  }
  positions_ = positions.clone();
  keys_ = cache_rows::copy_rows(keys, slots_, slots_);
  values_ = cache_rows::copy_rows(values, slots_, slots_);
  counts_.assign(static_cast<std::size_t>(positions.dim(0)), 0);
  for (int64_t b = 0; b < positions.dim(0); ++b) {
    const int32_t* p = positions_.data<int32_t>() + b * slots_;
    int64_t& n = counts_[static_cast<std::size_t>(b)];
    while (n < slots_ && p[n] >= 0) {
      if (n > 0 && p[n] <= p[n - 1]) throw base::FormatError(std::string(who) + ": sink positions not ascending");
      ++n;
    }
  }
}

SinkRows SinkRows::deep_copy() const {
  SinkRows copy = *this;
  if (!positions_.defined()) return copy;
  copy.positions_ = positions_.clone();
  copy.keys_ = keys_.clone();
  copy.values_ = values_.clone();
  return copy;
}

}  // namespace veloxquant
