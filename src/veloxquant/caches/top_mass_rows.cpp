// top_mass_rows.h: the full passes (keys, candidate compaction, the chosen rows' indices) in
// Highway (dispatched at run time), the histograms scalar.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/caches/top_mass_rows.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/caches/top_mass_rows.h"

#include <algorithm>
#include <bit>
#include <cstring>

// Shared by every target's pass (this file is compiled once per target): defined once.
#ifndef VELOXQUANT_TOP_MASS_ROWS_SHARED
#define VELOXQUANT_TOP_MASS_ROWS_SHARED
namespace veloxquant {
namespace {
// A double's bits mapped so that unsigned order is numeric order: positives get the sign bit set,
// negatives are inverted.
inline uint64_t order_key(double v) {
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof b);
  return (b >> 63) != 0 ? ~b : b | (uint64_t{1} << 63);
}

constexpr int kDigitBits = 8;
constexpr uint64_t kDigits = uint64_t{1} << kDigitBits;
// Histogram copies, used round robin: consecutive keys in one bucket would otherwise chain their
// increments through memory (store-to-load forwarding, ~5 cycles each).
constexpr int kCopies = 4;
}  // namespace
}  // namespace veloxquant
#endif  // VELOXQUANT_TOP_MASS_ROWS_SHARED

HWY_BEFORE_NAMESPACE();
namespace veloxquant::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR && HWY_HAVE_INTEGER64 && HWY_HAVE_FLOAT64
using DU = hn::ScalableTag<uint64_t>;

// keys[j] = order_key(mass[j]); lo / hi = their extremes.
void KeysImpl(const double* mass, int64_t n, uint64_t* keys, uint64_t* lo_out, uint64_t* hi_out) {
  const DU du;
  const hn::Rebind<double, DU> dd;
  const hn::RebindToSigned<DU> di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(du));
  const auto sign = hn::Set(du, uint64_t{1} << 63);
  auto lo = hn::Set(du, ~uint64_t{0}), hi = hn::Zero(du);
  int64_t j = 0;
  for (; j + lanes <= n; j += lanes) {
    const auto bits = hn::BitCast(du, hn::LoadU(dd, mass + j));
    const auto negative = hn::RebindMask(du, hn::Lt(hn::BitCast(di, bits), hn::Zero(di)));
    const auto key = hn::IfThenElse(negative, hn::Not(bits), hn::Or(bits, sign));
    hn::StoreU(key, du, keys + j);
    lo = hn::Min(lo, key);
    hi = hn::Max(hi, key);
  }
  uint64_t l = hn::GetLane(hn::MinOfLanes(du, lo)), h = hn::GetLane(hn::MaxOfLanes(du, hi));
  for (; j < n; ++j) {
    keys[j] = order_key(mass[j]);
    l = std::min(l, keys[j]);
    h = std::max(h, keys[j]);
  }
  *lo_out = l;
  *hi_out = h;
}

// The keys of cand whose digit at `shift` is `digit`, in order, into kept (which may be cand:
// writes trail reads); returns their count and extremes.
int64_t CompactImpl(const uint64_t* cand, int64_t count, int shift, uint64_t digit, uint64_t* kept, uint64_t* lo_out,
                    uint64_t* hi_out) {
  const DU du;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(du));
  const auto want = hn::Set(du, digit), low_bits = hn::Set(du, kDigits - 1);
  auto lo = hn::Set(du, ~uint64_t{0}), hi = hn::Zero(du);
  int64_t m = 0, i = 0;
  for (; i + lanes <= count; i += lanes) {
    const auto key = hn::LoadU(du, cand + i);
    const auto in = hn::Eq(hn::And(hn::ShiftRightSame(key, shift), low_bits), want);
    m += static_cast<int64_t>(hn::CompressBlendedStore(key, in, du, kept + m));
    lo = hn::Min(lo, hn::IfThenElse(in, key, hn::Set(du, ~uint64_t{0})));
    hi = hn::Max(hi, hn::IfThenElseZero(in, key));
  }
  uint64_t l = hn::GetLane(hn::MinOfLanes(du, lo)), h = hn::GetLane(hn::MaxOfLanes(du, hi));
  for (; i < count; ++i) {
    const uint64_t key = cand[i];
    if (((key >> shift) & (kDigits - 1)) == digit) {
      kept[m++] = key;
      l = std::min(l, key);
      h = std::max(h, key);
    }
  }
  *lo_out = l;
  *hi_out = h;
  return m;
}

// out = the indices j (ascending) with keys[j] >= threshold; returns how many. (The indices are
// compressed as 64-bit lanes, the keys' width, then narrowed: this Highway cannot rebind a mask to
// narrower lanes.)
int64_t AtLeastImpl(const uint64_t* keys, int64_t n, uint64_t threshold, int32_t* out) {
  const DU du;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(du));
  const auto t = hn::Set(du, threshold);
  auto index = hn::Iota(du, 0);
  const auto step = hn::Set(du, static_cast<uint64_t>(lanes));
  HWY_ALIGN uint64_t picked[hn::MaxLanes(du)];
  int64_t written = 0, j = 0;
  for (; j + lanes <= n; j += lanes) {
    const auto take = hn::Not(hn::Lt(hn::LoadU(du, keys + j), t));
    const size_t count = hn::CompressStore(index, take, du, picked);
    for (size_t c = 0; c < count; ++c) out[written + static_cast<int64_t>(c)] = static_cast<int32_t>(picked[c]);
    written += static_cast<int64_t>(count);
    index = hn::Add(index, step);
  }
  for (; j < n; ++j) {
    if (keys[j] >= threshold) out[written++] = static_cast<int32_t>(j);
  }
  return written;
}
#else
void KeysImpl(const double* mass, int64_t n, uint64_t* keys, uint64_t* lo_out, uint64_t* hi_out) {
  uint64_t l = ~uint64_t{0}, h = 0;
  for (int64_t j = 0; j < n; ++j) {
    keys[j] = order_key(mass[j]);
    l = std::min(l, keys[j]);
    h = std::max(h, keys[j]);
  }
  *lo_out = l;
  *hi_out = h;
}
int64_t CompactImpl(const uint64_t* cand, int64_t count, int shift, uint64_t digit, uint64_t* kept, uint64_t* lo_out,
                    uint64_t* hi_out) {
  uint64_t l = ~uint64_t{0}, h = 0;
  int64_t m = 0;
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t key = cand[i];
    if (((key >> shift) & (kDigits - 1)) == digit) {
      kept[m++] = key;
      l = std::min(l, key);
      h = std::max(h, key);
    }
  }
  *lo_out = l;
  *hi_out = h;
  return m;
}
int64_t AtLeastImpl(const uint64_t* keys, int64_t n, uint64_t threshold, int32_t* out) {
  int64_t written = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (keys[j] >= threshold) out[written++] = static_cast<int32_t>(j);
  }
  return written;
}
#endif

}  // namespace veloxquant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant {
HWY_EXPORT(KeysImpl);
HWY_EXPORT(CompactImpl);
HWY_EXPORT(AtLeastImpl);

void top_mass_rows(const double* mass, int64_t n, int64_t k, std::vector<uint64_t>& keys,
                   std::vector<uint64_t>& candidates, int32_t* out) {
  if (k <= 0) return;
  keys.resize(static_cast<std::size_t>(n));
  uint64_t lo = 0, hi = 0;
  HWY_DYNAMIC_DISPATCH(KeysImpl)(mass, n, keys.data(), &lo, &hi);
  // The threshold: the k-th largest key. `rank` counts down the keys still to pass from the top;
  // the candidates are the keys that share every bit above the current digit with it. Each pass
  // fixes the digit just below the highest bit in which the candidates still differ.
  const uint64_t* cand = keys.data();
  int64_t count = n, rank = k;
  candidates.resize(static_cast<std::size_t>(n));
  uint32_t hist[kCopies][kDigits];
  while (lo != hi) {
    const int top_bit = 63 - std::countl_zero(lo ^ hi);
    const int shift = std::max(0, top_bit - (kDigitBits - 1));
    for (auto& h : hist) std::fill(h, h + kDigits, 0u);
    int64_t i = 0;
    for (; i + kCopies <= count; i += kCopies) {
      for (int c = 0; c < kCopies; ++c) ++hist[c][(cand[i + c] >> shift) & (kDigits - 1)];
    }
    for (; i < count; ++i) ++hist[0][(cand[i] >> shift) & (kDigits - 1)];
    uint64_t digit = kDigits - 1;
    for (int64_t above = 0;; --digit) {
      const int64_t here = int64_t{hist[0][digit]} + hist[1][digit] + hist[2][digit] + hist[3][digit];
      if (above + here >= rank) {
        rank -= above;
        break;
      }
      above += here;
    }
    // Keep the keys in that digit's bucket (in place after the first pass: writes trail reads).
    count = HWY_DYNAMIC_DISPATCH(CompactImpl)(cand, count, shift, digit, candidates.data(), &lo, &hi);
    cand = candidates.data();
  }
  const uint64_t threshold = lo;  // `count` keys equal it; the first `rank` of them are taken
  if (rank == count) {            // every key at or above the threshold
    HWY_DYNAMIC_DISPATCH(AtLeastImpl)(keys.data(), n, threshold, out);
    return;
  }
  // Every key above the threshold, then the first `rank` keys equal to it, in index order.
  int64_t written = 0, equal = 0;
  for (int64_t j = 0; j < n && written < k; ++j) {  // out has k slots: stop at the k-th
    const uint64_t key = keys[static_cast<std::size_t>(j)];
    const bool is_equal = key == threshold;
    const bool take = key > threshold || (is_equal && equal < rank);
    equal += is_equal ? 1 : 0;
    out[written] = static_cast<int32_t>(j);
    written += take ? 1 : 0;
  }
}

}  // namespace veloxquant
#endif  // HWY_ONCE
