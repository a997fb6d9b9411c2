#include "veloxquant/caches/top_mass_rows.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace veloxquant {

namespace {
// A double's bits mapped so that unsigned order is numeric order: positives get the sign bit set,
// negatives are inverted.
uint64_t order_key(double v) {
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

void top_mass_rows(const double* mass, int64_t n, int64_t k, std::vector<uint64_t>& keys,
                   std::vector<uint64_t>& candidates, int32_t* out) {
  if (k <= 0) return;
  keys.resize(static_cast<std::size_t>(n));
  uint64_t lo = ~uint64_t{0}, hi = 0;
  for (int64_t j = 0; j < n; ++j) {
    const uint64_t key = order_key(mass[j]);
    keys[static_cast<std::size_t>(j)] = key;
    lo = std::min(lo, key);
    hi = std::max(hi, key);
  }
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
    uint64_t* kept = candidates.data();
    int64_t m = 0;
    lo = ~uint64_t{0};
    hi = 0;
    for (i = 0; i < count; ++i) {
      const uint64_t key = cand[i];
      kept[m] = key;
      const bool in = ((key >> shift) & (kDigits - 1)) == digit;
      lo = std::min(lo, in ? key : lo);
      hi = std::max(hi, in ? key : hi);
      m += in ? 1 : 0;
    }
    cand = kept;
    count = m;
  }
  const uint64_t threshold = lo;
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
