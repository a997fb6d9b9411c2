#include "veloxquant/quant/rabitq.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "veloxquant/core/bit_packing.h"
#include "veloxquant/core/simd_kernels.h"
#include "veloxquant/quant/code_io.h"

namespace veloxquant::quant {

RaBitQ::RaBitQ(int dim, int bits, uint64_t seed)
    : dim_((check_dim("rabitq", dim), dim)),
      bits_((check_bits("rabitq", bits, 1, 8), bits)),
      index_bytes_(core::dense_bytes(static_cast<std::size_t>(dim), bits)),
      rotation_(dim, seed) {
  const unsigned count = 1u << bits;
  for (unsigned u = 0; u < count; ++u) levels_.push_back(level_value(u));
}

float RaBitQ::level_value(unsigned u) const {
  if (bits_ == 1) {
    const float v = 1.0f / std::sqrt(static_cast<float>(dim_));
    return u ? v : -v;
  }
  return static_cast<float>(u) - static_cast<float>((1u << bits_) - 1u) / 2.0f;
}

double RaBitQ::best_grid_point(const float* r, std::size_t d, int bits, std::vector<float>& y) {
  const int top = 1 << (bits - 1);  // magnitudes 1/2, 3/2, ..., top - 1/2
  struct Event {
    double t;
    std::size_t i;
  };
  std::vector<Event> events;
  events.reserve(d * static_cast<std::size_t>(top - 1));
  double s = 0.0, q = 0.25 * static_cast<double>(d);
  for (std::size_t i = 0; i < d; ++i) {
    const double a = std::abs(static_cast<double>(r[i]));
    s += 0.5 * a;
    if (a > 0)
      for (int k = 1; k < top; ++k) events.push_back({k / a, i});
  }
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.t < b.t; });
  // Each event raises y_i from k - 1/2 to k + 1/2: S += a_i, Q += 2k (k = level reached - 1/2).
  std::vector<int> level(d, 0);  // y_i = level + 1/2
  double best = s / std::sqrt(q);
  std::size_t best_events = 0;
  for (std::size_t e = 0; e < events.size(); ++e) {
    const std::size_t i = events[e].i;
    ++level[i];
    s += std::abs(static_cast<double>(r[i]));
    q += 2.0 * level[i];
    const double cosine = s / std::sqrt(q);
    if (cosine > best) {
      best = cosine;
      best_events = e + 1;
    }
  }
  std::fill(level.begin(), level.end(), 0);
  for (std::size_t e = 0; e < best_events; ++e) ++level[events[e].i];
  y.resize(d);
  for (std::size_t i = 0; i < d; ++i) {
    const float magnitude = static_cast<float>(level[i]) + 0.5f;
    y[i] = r[i] < 0.0f ? -magnitude : magnitude;
  }
  return best;
}

void RaBitQ::encode(const float* x, std::size_t n, uint8_t* codes) const {
  const auto d = static_cast<std::size_t>(dim_);
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(dim_));
  thread_local std::vector<float> r, y;
  thread_local std::vector<uint8_t> idx;
  r.resize(d);
  idx.resize(d);
  for (std::size_t i = 0; i < n; ++i) {
    uint8_t* code = codes + i * code_bytes();
    const float* v = x + i * d;
    double sq = 0.0;
    for (std::size_t j = 0; j < d; ++j) sq += static_cast<double>(v[j]) * v[j];
    const float norm = static_cast<float>(std::sqrt(sq));
    const float inv = norm > 0.0f ? 1.0f / norm : 0.0f;
    for (std::size_t j = 0; j < d; ++j) r[j] = v[j] * inv;
    rotation_.forward(r.data(), r.data());
    float alignment = 1.0f;  // a zero vector has no direction; 1 keeps the estimator finite
    float inv_len = 1.0f;
    if (bits_ == 1) {
      double abs_sum = 0.0;
      for (std::size_t j = 0; j < d; ++j) {
        idx[j] = r[j] >= 0.0f ? 1 : 0;
        abs_sum += std::abs(r[j]);
      }
      if (norm > 0.0f) alignment = static_cast<float>(abs_sum) * inv_sqrt_d;
    } else {
      const double cosine = best_grid_point(r.data(), d, bits_, y);
      double len_sq = 0.0;
      const float half_range = static_cast<float>((1u << bits_) - 1u) / 2.0f;
      for (std::size_t j = 0; j < d; ++j) {
        idx[j] = static_cast<uint8_t>(y[j] + half_range);  // y = u - (2^B - 1)/2
        len_sq += static_cast<double>(y[j]) * y[j];
      }
      if (norm > 0.0f) alignment = static_cast<float>(cosine);
      inv_len = static_cast<float>(1.0 / std::sqrt(len_sq));
    }
    core::pack_dense(idx.data(), d, bits_, code);
    detail::write_f32(code + index_bytes_, norm);
    detail::write_f32(code + index_bytes_ + 4, alignment);
    if (bits_ > 1) detail::write_f32(code + index_bytes_ + 8, inv_len);
  }
}

float RaBitQ::alignment(const uint8_t* code) const { return detail::read_f32(code + index_bytes_ + 4); }

void RaBitQ::decode(const uint8_t* codes, std::size_t n, float* out) const {
  const auto d = static_cast<std::size_t>(dim_);
  thread_local std::vector<uint8_t> idx;
  idx.resize(d);
  for (std::size_t i = 0; i < n; ++i) {
    const uint8_t* code = codes + i * code_bytes();
    float* o = out + i * d;
    core::unpack_dense(code, d, bits_, idx.data());
    for (std::size_t j = 0; j < d; ++j) o[j] = levels_[idx[j]];
    rotation_.inverse(o, o);
    const float inv_len = bits_ == 1 ? 1.0f : detail::read_f32(code + index_bytes_ + 8);
    core::simd::scale(o, detail::read_f32(code + index_bytes_) * alignment(code) * inv_len, d);
  }
}

PreparedQuery RaBitQ::prepare_query(const float* query) const {
  PreparedQuery prepared;
  prepared.rotated.resize(static_cast<std::size_t>(dim_));
  rotation_.forward(query, prepared.rotated.data());
  if (detail::byte_aligned_bits(bits_)) {
    prepared.lut.resize(index_bytes_ * 256);
    detail::build_byte_lut(prepared.rotated.data(), static_cast<std::size_t>(dim_), bits_, levels_.data(), index_bytes_,
                           prepared.lut.data());
  }
  return prepared;
}

void RaBitQ::score(const PreparedQuery& query, const uint8_t* codes, std::size_t n, float* scores) const {
  const auto d = static_cast<std::size_t>(dim_);
  thread_local std::vector<uint8_t> idx;
  for (std::size_t i = 0; i < n; ++i) {
    const uint8_t* code = codes + i * code_bytes();
    float y_q;  // <y, Pi q> (1 bit: <o_bar, Pi q> directly)
    if (detail::byte_aligned_bits(bits_)) {
      y_q = core::simd::lut_sum(query.lut.data(), code, index_bytes_);
    } else {
      idx.resize(d);
      core::unpack_dense(code, d, bits_, idx.data());
      y_q = 0.0f;
      for (std::size_t j = 0; j < d; ++j) y_q += query.rotated[j] * levels_[idx[j]];
    }
    const float inv_len = bits_ == 1 ? 1.0f : detail::read_f32(code + index_bytes_ + 8);
    scores[i] = detail::read_f32(code + index_bytes_) * y_q * inv_len / alignment(code);
  }
}

}  // namespace veloxquant::quant
