#include "veloxquant/caches/anchorkv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>

#include "base/error.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/caches/anchorkv_rows.h"
#include "veloxquant/caches/kaq_mass.h"
#include "veloxquant/caches/quantized_blocks_tail.h"
#include "veloxquant/core/rng.h"
#include "veloxquant/errors.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {
constexpr const char* kTypeName = "AnchorKvCache";

void check_options(const AnchorKvOptions& o) {
  if (!(o.anchorkv_theta >= 0.0 && o.anchorkv_theta <= 1.0)) {
    throw QuantizerConfigError("anchorkv_theta must lie in [0, 1] (a fraction of the f16 bytes), got " +
                               blocks_tail::exact_double(o.anchorkv_theta));
  }
  if (o.anchorkv_window < 1 || o.anchorkv_window > 65536) {
    throw QuantizerConfigError("anchorkv_window must lie in [1, 65536], got " + std::to_string(o.anchorkv_window));
  }
  if (!(o.anchorkv_rho >= 0.0 && o.anchorkv_rho <= 1.0)) {
    throw QuantizerConfigError("anchorkv_rho must lie in [0, 1], got " + blocks_tail::exact_double(o.anchorkv_rho));
  }
  if (!(o.anchorkv_anchor_frac > 0.0 && o.anchorkv_anchor_frac <= 1.0)) {
    throw QuantizerConfigError("anchorkv_anchor_frac must lie in (0, 1], got " +
                               blocks_tail::exact_double(o.anchorkv_anchor_frac));
  }
  const int bits = o.anchorkv_residual_bits;
  if (bits != 1 && bits != 2 && bits != 4 && bits != 8) {
    throw QuantizerConfigError("anchorkv_residual_bits must be 1, 2, 4 or 8 (codes packed in bytes), got " +
                               std::to_string(bits));
  }
  if (o.anchorkv_seed < 0)
    throw QuantizerConfigError("anchorkv_seed must be >= 0, got " + std::to_string(o.anchorkv_seed));
}

std::byte* row_bytes(lm::Tensor& t, int64_t b, int64_t h, int64_t j) {
  const auto& st = t.strides();
  return t.raw_data() + (b * st[0] + h * st[1] + j * st[2]) * static_cast<int64_t>(t.element_size());
}

float f16_round(float x) { return base::f16_to_f32(base::f32_to_f16(x)); }

// x (n floats) as a per-row min/step code of `bits` bits per element, packed low bits first;
// params = (min, step) as stored (f16). out_bytes: n * bits / 8.
void encode_residual(const float* x, int64_t n, int bits, uint8_t* codes, uint16_t* params) {
  float lo = x[0], hi = x[0];
  for (int64_t i = 1; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  const int levels = (1 << bits) - 1;
  const float min16 = f16_round(lo);
  float step16 = f16_round((hi - min16) / static_cast<float>(levels));
  if (!(step16 > 0.0f)) step16 = 0.0f;
  std::memset(codes, 0, static_cast<std::size_t>(n * bits / 8));
  for (int64_t i = 0; i < n; ++i) {
    const int c = step16 > 0.0f ? std::clamp(static_cast<int>(std::lround((x[i] - min16) / step16)), 0, levels) : 0;
    codes[(i * bits) / 8] |= static_cast<uint8_t>(c << ((i * bits) % 8));
  }
  params[0] = base::f32_to_f16(min16);
  params[1] = base::f32_to_f16(step16);
}
}  // namespace

void anchorkv_decode_residual(const uint8_t* codes, const uint16_t* params, int64_t n, int bits, float* out) {
  const float lo = base::f16_to_f32(params[0]), step = base::f16_to_f32(params[1]);
  if (bits == 2 && n % 4 == 0) {  // the default: four codes per byte, one table lookup per byte
    const float level[4] = {lo, lo + step, lo + 2.0f * step, lo + 3.0f * step};
    for (int64_t i = 0; i < n; i += 4) {
      const unsigned byte = codes[i / 4];
      out[i] = level[byte & 3];
      out[i + 1] = level[(byte >> 2) & 3];
      out[i + 2] = level[(byte >> 4) & 3];
      out[i + 3] = level[byte >> 6];
    }
    return;
  }
  const int mask = (1 << bits) - 1;
  for (int64_t i = 0; i < n; ++i) {
    const int c = (codes[(i * bits) / 8] >> ((i * bits) % 8)) & mask;
    out[i] = lo + static_cast<float>(c) * step;
  }
}

AnchorKvCache::AnchorKvCache(const AnchorKvOptions& options) : o_(options) { check_options(o_); }

int64_t AnchorKvCache::residual_row_bytes() const { return (dk_ + dv_) * o_.anchorkv_residual_bits / 8; }

std::size_t AnchorKvCache::nbytes() const {
  std::size_t total = 0;
  for (const lm::Tensor* t :
       {&anchor_k_, &anchor_v_, &anchor_pos_, &records_, &residual_codes_, &residual_params_, &tail_k_, &tail_v_}) {
    total += t->storage_bytes();
  }
  return total;
}

void AnchorKvCache::allocate(const lm::Tensor& keys, const lm::Tensor& values) {
  batch_ = keys.dim(0);
  heads_ = keys.dim(1);
  dk_ = keys.dim(3);
  dv_ = values.dim(3);
  if ((dk_ + dv_) * o_.anchorkv_residual_bits % 8 != 0) {
    throw QuantizerConfigError("anchorkv_residual_bits " + std::to_string(o_.anchorkv_residual_bits) +
                               " does not pack head dims " + std::to_string(dk_) + " + " + std::to_string(dv_) +
                               " into whole bytes");
  }
  dtype_ = keys.dtype();
  tail_k_ = lm::Tensor({batch_, heads_, o_.anchorkv_window, dk_}, dtype_);
  tail_v_ = lm::Tensor({batch_, heads_, o_.anchorkv_window, dv_}, dtype_);
  anchor_k_ = lm::Tensor({batch_, heads_, 0, dk_}, dtype_);
  anchor_v_ = lm::Tensor({batch_, heads_, 0, dv_}, dtype_);
  anchor_pos_ = lm::Tensor({batch_, heads_, 0, 1}, lm::DType::I32);
  records_ = lm::Tensor({batch_, heads_, 0, 3}, lm::DType::U32);
  residual_codes_ = lm::Tensor({batch_, heads_, 0, std::max<int64_t>(1, residual_row_bytes())}, lm::DType::U8);
  residual_params_ = lm::Tensor({batch_, heads_, 0, 4}, lm::DType::F16);
}

namespace {
int64_t grown(int64_t cap, int64_t need, int64_t step) {
  return need <= cap ? cap : cap + ((need - cap + step - 1) / step) * step;
}
}  // namespace

AnchorKvCache::Record AnchorKvCache::record(int64_t b, int64_t h, int64_t j) const {
  const uint32_t* r = row_ptr<uint32_t>(records_, b, h, j);
  return {static_cast<uint16_t>(r[0] & 0xFFFF), static_cast<uint16_t>(r[1] & 0xFFFF),
          base::f16_to_f32(static_cast<uint16_t>(r[0] >> 16)), base::f16_to_f32(static_cast<uint16_t>(r[1] >> 16)),
          r[2]};
}

int32_t AnchorKvCache::anchor_position(int64_t b, int64_t h, int64_t a) const {
  return *row_ptr<int32_t>(anchor_pos_, b, h, a);
}

void AnchorKvCache::reconstruct(int64_t b, int64_t h, int64_t j, float* key, float* value) const {
  const Record r = record(b, h, j);
  const attention::PlainRows ak = attention::PlainRows::of(anchor_k_), av = attention::PlainRows::of(anchor_v_);
  ak.widen(b, h, r.key_anchor, r.key_anchor + 1, key);
  av.widen(b, h, r.value_anchor, r.value_anchor + 1, value);
  for (int64_t e = 0; e < dk_; ++e) key[e] *= r.key_coef;
  for (int64_t e = 0; e < dv_; ++e) value[e] *= r.value_coef;
  if (r.slot == kNoResidual) return;
  thread_local std::vector<float> res;
  res.resize(static_cast<std::size_t>(std::max(dk_, dv_)));
  const uint8_t* codes = row_ptr<uint8_t>(residual_codes_, b, h, r.slot);
  const uint16_t* params = row_ptr<uint16_t>(residual_params_, b, h, r.slot);
  const int bits = o_.anchorkv_residual_bits;
  anchorkv_decode_residual(codes, params, dk_, bits, res.data());
  for (int64_t e = 0; e < dk_; ++e) key[e] += res[e];
  anchorkv_decode_residual(codes + dk_ * bits / 8, params + 2, dv_, bits, res.data());
  for (int64_t e = 0; e < dv_; ++e) value[e] += res[e];
}

// One head's spill of `spill` rows (f32 k / v) into compressed rows rows_ .. rows_ + spill - 1:
// `new_anchors` of them become anchors (anchors_ ..), the rest are encoded against every anchor,
// and the `new_slots` non-anchor rows of highest utility get residual slots slot_base ...
void AnchorKvCache::compress(int64_t b, int64_t h, const float* k, const float* v, int64_t spill, const float* proxies,
                             int64_t n_proxies, int64_t new_anchors, int64_t new_slots, int64_t slot_base) {
  // This thread's buffers, reused: with a full window every decode step spills one row here, and
  // the step must not allocate. (std::sort with the index as tie-break, not std::stable_sort,
  // which allocates its merge buffer: the same order.)
  thread_local std::vector<float> mass, ak, av, rk, rv;
  thread_local std::vector<int64_t> order, chosen, rest, anchor_of, by_utility;
  thread_local std::vector<char> is_anchor;
  thread_local std::vector<double> utility;
  mass.resize(static_cast<std::size_t>(spill));
  // The mass only ranks the spill's rows against each other (anchor choice, residual utility):
  // a single row (every decode step) needs none, and its 32 double dot products per head and
  // layer were a serial cost of every step.
  if (spill > 1) {
    kaq_mass(k, spill, proxies, n_proxies, dk_, mass.data());
  } else {
    mass[0] = 0.0f;
  }
  // Anchors: round(rho * new) by attention mass (ties to the older row), the rest uniform samples.
  order.resize(static_cast<std::size_t>(spill));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t c) { return mass[a] > mass[c] || (mass[a] == mass[c] && a < c); });
  const auto by_attention = std::min<int64_t>(new_anchors, std::llround(o_.anchorkv_rho * double(new_anchors)));
  is_anchor.assign(static_cast<std::size_t>(spill), 0);
  chosen.assign(order.begin(), order.begin() + by_attention);
  for (int64_t i : chosen) is_anchor[i] = 1;
  rest.clear();
  for (int64_t i = 0; i < spill; ++i) {
    if (!is_anchor[i]) rest.push_back(i);
  }
  core::Rng rng(static_cast<uint64_t>(o_.anchorkv_seed) * 1000003u + static_cast<uint64_t>(offset_rows_at_) * 131u +
                static_cast<uint64_t>(b * heads_ + h));
  for (int64_t n = by_attention; n < new_anchors; ++n) {  // partial Fisher-Yates over the rest
    const int64_t left = static_cast<int64_t>(rest.size()) - (n - by_attention);
    const int64_t pick = (n - by_attention) + static_cast<int64_t>(rng.below(static_cast<uint64_t>(left)));
    std::swap(rest[n - by_attention], rest[pick]);
    chosen.push_back(rest[n - by_attention]);
    is_anchor[rest[n - by_attention]] = 1;
  }
  std::sort(chosen.begin(), chosen.end());
  anchor_of.assign(static_cast<std::size_t>(spill), -1);
  for (std::size_t a = 0; a < chosen.size(); ++a) {
    const int64_t i = chosen[a], slot = anchors_ + static_cast<int64_t>(a);
    anchor_of[i] = slot;
    cache_rows::store_f32(k + i * dk_, static_cast<std::size_t>(dk_), row_bytes(anchor_k_, b, h, slot), dtype_);
    cache_rows::store_f32(v + i * dv_, static_cast<std::size_t>(dv_), row_bytes(anchor_v_, b, h, slot), dtype_);
    *row_ptr<int32_t>(anchor_pos_, b, h, slot) = static_cast<int32_t>(offset_rows_at_ + i);
  }
  // Every anchor as stored (f32) and its squared norm.
  const int64_t total_anchors = anchors_ + static_cast<int64_t>(chosen.size());
  ak.resize(static_cast<std::size_t>(total_anchors * dk_));
  av.resize(static_cast<std::size_t>(total_anchors * dv_));
  attention::PlainRows::of(anchor_k_).widen(b, h, 0, total_anchors, ak.data());
  attention::PlainRows::of(anchor_v_).widen(b, h, 0, total_anchors, av.data());
  const auto best_anchor = [&](const float* x, const std::vector<float>& anchors, int64_t d, float* coef) {
    double best = -1.0;
    int64_t best_a = 0;
    double best_dot = 0.0, best_norm = 1.0;
    const auto consider = [&](int64_t a, double dot, double norm) {
      const double gain = norm > 0.0 ? dot * dot / norm : 0.0;  // |x|^2 - |x - c a|^2
      if (gain > best) best = gain, best_a = a, best_dot = dot, best_norm = norm;
    };
    // Four anchors per pass over x: eight independent sums (each still in order of e, so the same
    // values) instead of two dependent chains — the search runs at every decode step.
    int64_t a = 0;
    for (; a + 4 <= total_anchors; a += 4) {
      const float* r0 = anchors.data() + a * d;
      const float* r1 = r0 + d;
      const float* r2 = r1 + d;
      const float* r3 = r2 + d;
      double d0 = 0.0, d1 = 0.0, d2 = 0.0, d3 = 0.0, n0 = 0.0, n1 = 0.0, n2 = 0.0, n3 = 0.0;
      for (int64_t e = 0; e < d; ++e) {
        const double xe = x[e];
        d0 += xe * r0[e], n0 += double(r0[e]) * r0[e];
        d1 += xe * r1[e], n1 += double(r1[e]) * r1[e];
        d2 += xe * r2[e], n2 += double(r2[e]) * r2[e];
        d3 += xe * r3[e], n3 += double(r3[e]) * r3[e];
      }
      consider(a, d0, n0);
      consider(a + 1, d1, n1);
      consider(a + 2, d2, n2);
      consider(a + 3, d3, n3);
    }
    for (; a < total_anchors; ++a) {
      const float* row = anchors.data() + a * d;
      double dot = 0.0, norm = 0.0;
      for (int64_t e = 0; e < d; ++e) dot += double(x[e]) * row[e], norm += double(row[e]) * row[e];
      consider(a, dot, norm);
    }
    *coef = f16_round(best_norm > 0.0 ? static_cast<float>(best_dot / best_norm) : 0.0f);
    return best_a;
  };
  rk.resize(static_cast<std::size_t>(spill * dk_));
  rv.resize(static_cast<std::size_t>(spill * dv_));
  utility.assign(static_cast<std::size_t>(spill), -1.0);
  for (int64_t i = 0; i < spill; ++i) {
    uint32_t* rec = row_ptr<uint32_t>(records_, b, h, rows_ + i);
    int64_t ka, va;
    float kc, vc;
    if (anchor_of[i] >= 0) {
      ka = va = anchor_of[i];
      kc = vc = 1.0f;
    } else {
      ka = best_anchor(k + i * dk_, ak, dk_, &kc);
      va = best_anchor(v + i * dv_, av, dv_, &vc);
      double err = 0.0;
      for (int64_t e = 0; e < dk_; ++e) {
        rk[i * dk_ + e] = k[i * dk_ + e] - kc * ak[ka * dk_ + e];
        err += double(rk[i * dk_ + e]) * rk[i * dk_ + e];
      }
      for (int64_t e = 0; e < dv_; ++e) {
        rv[i * dv_ + e] = v[i * dv_ + e] - vc * av[va * dv_ + e];
        err += double(rv[i * dv_ + e]) * rv[i * dv_ + e];
      }
      utility[i] = double(mass[i]) * err;
    }
    rec[0] = static_cast<uint32_t>(ka) | (static_cast<uint32_t>(base::f32_to_f16(kc)) << 16);
    rec[1] = static_cast<uint32_t>(va) | (static_cast<uint32_t>(base::f32_to_f16(vc)) << 16);
    rec[2] = kNoResidual;
  }
  // Residuals for the new_slots non-anchor rows of highest utility (ties to the older row), in row order.
  by_utility.clear();
  for (int64_t i = 0; i < spill; ++i) {
    if (anchor_of[i] < 0) by_utility.push_back(i);
  }
  std::sort(by_utility.begin(), by_utility.end(),
            [&](int64_t a, int64_t c) { return utility[a] > utility[c] || (utility[a] == utility[c] && a < c); });
  by_utility.resize(static_cast<std::size_t>(new_slots));
  std::sort(by_utility.begin(), by_utility.end());
  const int bits = o_.anchorkv_residual_bits;
  for (std::size_t n = 0; n < by_utility.size(); ++n) {
    const int64_t i = by_utility[n], slot = slot_base + static_cast<int64_t>(n);
    uint8_t* codes = row_ptr<uint8_t>(residual_codes_, b, h, slot);
    uint16_t* params = row_ptr<uint16_t>(residual_params_, b, h, slot);
    encode_residual(rk.data() + i * dk_, dk_, bits, codes, params);
    encode_residual(rv.data() + i * dv_, dv_, bits, codes + dk_ * bits / 8, params + 2);
    row_ptr<uint32_t>(records_, b, h, rows_ + i)[2] = static_cast<uint32_t>(slot);
  }
}

void AnchorKvCache::store(const lm::Tensor& keys, const lm::Tensor& values) {
  const int64_t s = keys.dim(2), w = o_.anchorkv_window, tail = offset_ - rows_, n = tail + s;
  if (n <= w) {
    lm::copy_token_rows(keys, tail_k_, tail);
    lm::copy_token_rows(values, tail_v_, tail);
    offset_ += s;
    return;
  }
  const int64_t spill = n - w, heads = batch_ * heads_;
  // Counts shared by every head: anchors to reach ceil(frac * rows) (at least one), and residual
  // slots while all residuals fit theta of the f16 bytes of the compressed rows.
  const int64_t rows_after = rows_ + spill;
  const int64_t anchors_after = std::clamp<int64_t>(
      static_cast<int64_t>(std::ceil(o_.anchorkv_anchor_frac * static_cast<double>(rows_after) - 1e-9)), 1, rows_after);
  if (anchors_after > 65536) {  // anchor indices are 16 bits in the records
    throw base::InvalidArgument(
        "AnchorKvCache: " + std::to_string(anchors_after) +
        " anchors per head (anchorkv_anchor_frac x tokens) exceed the 65536 a record can index");
  }
  const int64_t new_anchors = std::min(spill, std::max<int64_t>(0, anchors_after - anchors_));
  const double slot_bytes = static_cast<double>(residual_row_bytes() + 8);  // codes + 4 f16 params
  const auto budget_slots = static_cast<int64_t>(
      std::floor(o_.anchorkv_theta * static_cast<double>(rows_after * (dk_ + dv_) * 2) / slot_bytes + 1e-9));
  const int64_t new_slots = std::clamp<int64_t>(budget_slots - slots_, 0, spill - new_anchors);
  row_cap_ = grown(row_cap_, rows_after, kGrowthStep);
  anchor_cap_ = grown(anchor_cap_, anchors_ + new_anchors, kAnchorStep);
  slot_cap_ = grown(slot_cap_, slots_ + new_slots, kSlotStep);
  if (records_.dim(2) < row_cap_) records_ = cache_rows::copy_rows(records_, rows_, row_cap_);
  if (anchor_k_.dim(2) < anchor_cap_) {
    anchor_k_ = cache_rows::copy_rows(anchor_k_, anchors_, anchor_cap_);
    anchor_v_ = cache_rows::copy_rows(anchor_v_, anchors_, anchor_cap_);
    anchor_pos_ = cache_rows::copy_rows(anchor_pos_, anchors_, anchor_cap_);
  }
  if (residual_codes_.dim(2) < slot_cap_) {
    residual_codes_ = cache_rows::copy_rows(residual_codes_, slots_, slot_cap_);
    residual_params_ = cache_rows::copy_rows(residual_params_, slots_, slot_cap_);
  }
  thread_local std::vector<float> new_k, new_v;
  cache_rows::widen_to_f32(keys, new_k);
  cache_rows::widen_to_f32(values, new_v);
  thread_local std::vector<float> pk, pv;
  pk.resize(static_cast<std::size_t>(n * dk_));
  pv.resize(static_cast<std::size_t>(n * dv_));
  offset_rows_at_ = rows_;
  if (s == 1 && tail == w) {
    // A decode step with a full window: its oldest row leaves (spill 1, no KaQ mass needed) and
    // the window moves up one row in place, bytes as stored, instead of every window row
    // widened to f32 and written back (the same values: the dtype round trip is exact).
    const int64_t kb = dk_ * static_cast<int64_t>(tail_k_.element_size());
    const int64_t vb = dv_ * static_cast<int64_t>(tail_v_.element_size());
    for (int64_t bh = 0; bh < heads; ++bh) {
      std::byte* tk = blocks_tail::head_rows(tail_k_, bh, w, dk_);
      std::byte* tv = blocks_tail::head_rows(tail_v_, bh, w, dv_);
      cache_rows::load_f32(tk, dtype_, static_cast<std::size_t>(dk_), pk.data());
      cache_rows::load_f32(tv, dtype_, static_cast<std::size_t>(dv_), pv.data());
      compress(bh / heads_, bh % heads_, pk.data(), pv.data(), 1, nullptr, 0, new_anchors, new_slots, slots_);
      std::memmove(tk, tk + kb, static_cast<std::size_t>((w - 1) * kb));
      std::memmove(tv, tv + vb, static_cast<std::size_t>((w - 1) * vb));
      cache_rows::store_f32(new_k.data() + bh * dk_, static_cast<std::size_t>(dk_), tk + (w - 1) * kb, dtype_);
      cache_rows::store_f32(new_v.data() + bh * dv_, static_cast<std::size_t>(dv_), tv + (w - 1) * vb, dtype_);
    }
    rows_ = rows_after;
    anchors_ += new_anchors;
    slots_ += new_slots;
    offset_ += s;
    return;
  }
  for (int64_t bh = 0; bh < heads; ++bh) {
    blocks_tail::gather_pending(tail_k_, dtype_, bh, w, dk_, tail, new_k.data(), s, pk.data());
    blocks_tail::gather_pending(tail_v_, dtype_, bh, w, dv_, tail, new_v.data(), s, pv.data());
    // KaQ proxies: the rows that stay in the window (the newest keys).
    compress(bh / heads_, bh % heads_, pk.data(), pv.data(), spill, pk.data() + spill * dk_, w, new_anchors, new_slots,
             slots_);
    blocks_tail::keep_in_tail(pk.data() + spill * dk_, w, tail_k_, dtype_, bh, w, dk_);
    blocks_tail::keep_in_tail(pv.data() + spill * dv_, w, tail_v_, dtype_, bh, w, dv_);
  }
  rows_ = rows_after;
  anchors_ += new_anchors;
  slots_ += new_slots;
  offset_ += s;
}

lm::KeysValues AnchorKvCache::fetch_with(const lm::Tensor& keys, const lm::Tensor& values) const {
  // What attention over this call sees: the compressed rows reconstructed, the exact window, then
  // the call's own rows as given.
  const int64_t s = keys.dim(2), tail = offset_ - rows_, t = offset_ + s;
  const lm::DType dtype = keys.dtype();
  lm::Tensor k({batch_, heads_, t, dk_}, dtype), v({batch_, heads_, t, dv_}, dtype);
  thread_local std::vector<float> new_k, new_v;
  cache_rows::widen_to_f32(keys, new_k);
  cache_rows::widen_to_f32(values, new_v);
  const int64_t ke = static_cast<int64_t>(k.element_size());
  std::vector<float> kr(static_cast<std::size_t>(std::max<int64_t>(t, 1) * dk_)),
      vr(static_cast<std::size_t>(std::max<int64_t>(t, 1) * dv_));
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      for (int64_t j = 0; j < rows_; ++j) reconstruct(b, h, j, kr.data() + j * dk_, vr.data() + j * dv_);
      blocks_tail::gather_pending(tail_k_, dtype_, bh, o_.anchorkv_window, dk_, tail, new_k.data(), s,
                                  kr.data() + rows_ * dk_);
      blocks_tail::gather_pending(tail_v_, dtype_, bh, o_.anchorkv_window, dv_, tail, new_v.data(), s,
                                  vr.data() + rows_ * dv_);
      cache_rows::store_f32(kr.data(), static_cast<std::size_t>(t * dk_), k.raw_data() + bh * t * dk_ * ke, dtype);
      cache_rows::store_f32(vr.data(), static_cast<std::size_t>(t * dv_), v.raw_data() + bh * t * dv_ * ke, dtype);
    }
  }
  return {std::move(k), std::move(v)};
}

lm::KeysValues AnchorKvCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  lm::check_new_tokens(keys, values, "AnchorKvCache::update_and_fetch");
  if (!tail_k_.defined()) {
    allocate(keys, values);
  } else {
    cache_rows::check_row_layout(keys, values, {batch_, heads_, dk_, dv_}, "AnchorKvCache::update_and_fetch");
  }
  lm::KeysValues out = fetch_with(keys, values);
  store(keys, values);
  return out;
}

void AnchorKvCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument("AnchorKvCache::fused_attention: queries, keys and values are required");
  }
  lm::check_new_tokens(*request.keys, *request.values, "AnchorKvCache::fused_attention");
  if (!tail_k_.defined()) {
    allocate(*request.keys, *request.values);
  } else {
    cache_rows::check_row_layout(*request.keys, *request.values, {batch_, heads_, dk_, dv_},
                                 "AnchorKvCache::fused_attention");
  }
  attention::check_fused_shapes("AnchorKvCache::fused_attention", *request.queries, *request.keys, batch_, heads_, dk_,
                                dv_, out);
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, offset_, out, contiguous_queries);
  lm::Tensor call_k_copy, call_v_copy;  // only for tensors whose rows are strided
  const lm::Tensor& call_k = cache_rows::with_contiguous_rows(*request.keys, call_k_copy);
  const lm::Tensor& call_v = cache_rows::with_contiguous_rows(*request.values, call_v_copy);
  const AnchorKvRows rows(*this, call_k, call_v);
  const attention::RowSource* segments[] = {&rows};
  attention::attend(call, segments, 1, attention::request_pool(request));
  store(*request.keys, *request.values);
}

std::vector<lm::Tensor> AnchorKvCache::state() const {
  if (!tail_k_.defined()) return {};
  return {anchor_k_.slice(2, 0, anchors_),      anchor_v_.slice(2, 0, anchors_),
          anchor_pos_.slice(2, 0, anchors_),    records_.slice(2, 0, rows_),
          residual_codes_.slice(2, 0, slots_),  residual_params_.slice(2, 0, slots_),
          tail_k_.slice(2, 0, offset_ - rows_), tail_v_.slice(2, 0, offset_ - rows_)};
}

std::vector<std::string> AnchorKvCache::meta_state() const {
  return {blocks_tail::exact_double(o_.anchorkv_theta),
          std::to_string(o_.anchorkv_window),
          blocks_tail::exact_double(o_.anchorkv_rho),
          blocks_tail::exact_double(o_.anchorkv_anchor_frac),
          std::to_string(o_.anchorkv_residual_bits),
          std::to_string(o_.anchorkv_seed),
          std::to_string(offset_),
          std::to_string(rows_),
          std::to_string(anchors_),
          std::to_string(slots_),
          std::string(lm::dtype_name(dtype_))};
}

void AnchorKvCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "AnchorKvCache::from_state";
  if (meta.size() != 11) {
    throw base::FormatError(std::string(who) + ": expected 11 meta entries, got " + std::to_string(meta.size()));
  }
  const auto integer = [&](std::size_t i, const char* what) { return cache_rows::parse_meta_int(meta[i], who, what); };
  AnchorKvOptions o;
  o.anchorkv_theta = blocks_tail::parse_meta_double(meta[0], who, "theta");
  o.anchorkv_window = static_cast<int>(integer(1, "window"));
  o.anchorkv_rho = blocks_tail::parse_meta_double(meta[2], who, "rho");
  o.anchorkv_anchor_frac = blocks_tail::parse_meta_double(meta[3], who, "anchor fraction");
  o.anchorkv_residual_bits = static_cast<int>(integer(4, "residual bits"));
  o.anchorkv_seed = static_cast<int>(integer(5, "seed"));
  const int64_t offset = integer(6, "offset"), rows = integer(7, "rows"), anchors = integer(8, "anchors"),
                slots = integer(9, "residual slots");
  std::optional<AnchorKvCache> made;
  try {
    made.emplace(o);
  } catch (const QuantizerConfigError& e) {
    throw base::FormatError(std::string(who) + ": " + e.what());
  }
  AnchorKvCache& fresh = *made;
  if (state.empty()) {
    if (offset != 0) throw base::FormatError(std::string(who) + ": no tensors for offset " + meta[6]);
    *this = std::move(fresh);
    return;
  }
  if (state.size() != 8)
    throw base::FormatError(std::string(who) + ": expected 8 tensors, got " + std::to_string(state.size()));
  const int64_t tail = offset - rows;
  if (rows < 0 || tail < 0 || tail > o.anchorkv_window || anchors < 0 || anchors > rows || slots < 0 || slots > rows ||
      (rows > 0 && anchors == 0)) {
    throw base::FormatError(std::string(who) + ": inconsistent offset " + meta[6] + " / rows " + meta[7] +
                            " / anchors " + meta[8] + " / residual slots " + meta[9]);
  }
  blocks_tail::check_tail_state(state[6], state[7], tail, who, meta[6], meta[7]);
  lm::DType dtype{};
  try {
    dtype = lm::parse_float_dtype(meta[10]);
    fresh.allocate(state[6].astype(dtype), state[7].astype(dtype));
  } catch (const QuantizerConfigError& e) {
    throw base::FormatError(std::string(who) + ": " + e.what());
  } catch (const base::InvalidArgument& e) {
    throw base::FormatError(std::string(who) + ": " + e.what());
  }
  const lm::Tensor* like[] = {&fresh.anchor_k_, &fresh.anchor_v_,       &fresh.anchor_pos_,
                              &fresh.records_,  &fresh.residual_codes_, &fresh.residual_params_};
  const int64_t counts[] = {anchors, anchors, anchors, rows, slots, slots};
  for (int i = 0; i < 6; ++i) {
    const lm::Tensor& s = state[static_cast<std::size_t>(i)];
    const bool float_rows = i < 2;
    if (s.ndim() != 4 || s.dim(0) != fresh.batch_ || s.dim(1) != fresh.heads_ || s.dim(2) != counts[i] ||
        s.dim(3) != like[i]->dim(3) || (!float_rows && s.dtype() != like[i]->dtype())) {
      throw base::FormatError(std::string(who) + ": tensor " + std::to_string(i) + " " + lm::shape_text(s.shape()) +
                              " does not match " + std::to_string(counts[i]) + " rows");
    }
  }
  fresh.anchor_k_ = cache_rows::copy_rows(state[0].astype(dtype), anchors, anchors);
  fresh.anchor_v_ = cache_rows::copy_rows(state[1].astype(dtype), anchors, anchors);
  fresh.anchor_pos_ = cache_rows::copy_rows(state[2], anchors, anchors);
  fresh.records_ = cache_rows::copy_rows(state[3], rows, rows);
  fresh.residual_codes_ = cache_rows::copy_rows(state[4], slots, slots);
  fresh.residual_params_ = cache_rows::copy_rows(state[5], slots, slots);
  lm::copy_token_rows(state[6].astype(dtype), fresh.tail_k_, 0);
  lm::copy_token_rows(state[7].astype(dtype), fresh.tail_v_, 0);
  fresh.offset_ = offset;
  fresh.rows_ = fresh.row_cap_ = rows;
  fresh.anchors_ = fresh.anchor_cap_ = anchors;
  fresh.slots_ = fresh.slot_cap_ = slots;
  *this = std::move(fresh);
}

std::shared_ptr<lm::KVCache> AnchorKvCache::clone() const {
  auto copy = std::make_shared<AnchorKvCache>(*this);
  for (lm::Tensor* t : {&copy->anchor_k_, &copy->anchor_v_, &copy->anchor_pos_, &copy->records_, &copy->residual_codes_,
                        &copy->residual_params_, &copy->tail_k_, &copy->tail_v_}) {
    if (t->defined()) *t = t->clone();
  }
  return copy;
}

void validate_anchorkv_options(const KVCacheConfig& config) {
  const AnchorKvOptions& o = config.options<AnchorKvOptions>();
  check_options(o);
  if (2 * config.head_dim * o.anchorkv_residual_bits % 8 != 0) {
    throw QuantizerConfigError("anchorkv_residual_bits " + std::to_string(o.anchorkv_residual_bits) +
                               " does not pack 2 x head_dim " + std::to_string(config.head_dim) + " into whole bytes");
  }
}

std::shared_ptr<lm::KVCache> make_anchorkv_cache(const KVCacheConfig& config) {
  validate_anchorkv_options(config);
  return std::make_shared<AnchorKvCache>(config.options<AnchorKvOptions>());
}

MethodDescriptor anchorkv_method() {
  MethodDescriptor m;
  m.name = "anchorkv";
  m.family = "hybrid";
  m.is_servable = true;
  m.capabilities = {.trimmable = false, .fused_attention = true, .real_compression = true};
  m.blurb =
      "Per head: exact anchors (top key-as-query attention + uniform samples, anchorkv_anchor_frac of the "
      "tokens); every other token outside the exact anchorkv_window is an anchor index + one coefficient for "
      "its key and for its value; anchorkv_residual_bits residuals for the highest-utility tokens within "
      "anchorkv_theta of the f16 bytes";
  m.paper = "AnchorKV (Khalaf et al., Technion, preprint arXiv 2608.02901; spec venue exception)";
  m.deviations =
      "The spec gives the row and the fields only; this is our reading (docs/methods/anchorkv.md): rows are "
      "compressed when they leave the exact anchorkv_window, all the rows leaving in one call together; a head keeps "
      "ceil(anchorkv_anchor_frac * compressed rows) anchors, new ones taken from the leaving rows (round(rho * new) "
      "by key-as-query attention mass from the window's keys, the rest uniform samples seeded by anchorkv_seed); key "
      "and value each pick their own anchor (largest projection) and f16 coefficient; residual utility = KaQ mass "
      "x squared anchor error; theta bounds the residual bytes (codes + f16 min/step) against the f16 bytes of the "
      "compressed rows; anchors stay in the input dtype. Not trimmable.";
  m.docs = "docs/methods/anchorkv.md";
  m.fields = {
      option_field("anchorkv_theta", &AnchorKvOptions::anchorkv_theta,
                   "Residual byte budget as a fraction of the f16 bytes of the compressed tokens, in [0, 1]"),
      option_field("anchorkv_window", &AnchorKvOptions::anchorkv_window, "Newest tokens kept exact", 1, 65536),
      option_field("anchorkv_rho", &AnchorKvOptions::anchorkv_rho,
                   "Share of new anchors chosen by attention (the rest uniform samples), in [0, 1]"),
      option_field("anchorkv_anchor_frac", &AnchorKvOptions::anchorkv_anchor_frac,
                   "Anchors per compressed token, in (0, 1]"),
      option_field("anchorkv_residual_bits", &AnchorKvOptions::anchorkv_residual_bits,
                   "Bits per residual element: 1, 2, 4 or 8", 1, 8),
      option_field("anchorkv_seed", &AnchorKvOptions::anchorkv_seed, "Seed of the uniform anchor samples", 0,
                   2147483647),
  };
  m.validate = validate_anchorkv_options;
  m.make_serving = make_anchorkv_cache;
  m.cache_type_name = kTypeName;
  // Placeholder parameters: from_state() rebuilds every one of them from meta_state().
  m.make_restorable = [] { return std::make_shared<AnchorKvCache>(AnchorKvOptions{}); };
  return m;
}

}  // namespace veloxquant
