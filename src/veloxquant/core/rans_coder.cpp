#include "veloxquant/core/rans_coder.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"

namespace veloxquant::core {

std::vector<uint16_t> normalized_frequencies(const uint32_t* counts, int alphabet) {
  uint64_t total = 0;
  for (int s = 0; s < alphabet; ++s) total += counts[s];
  if (total == 0) throw base::InvalidArgument("normalized_frequencies: empty stream");
  std::vector<uint16_t> freqs(static_cast<std::size_t>(alphabet), 0);
  // Proportional share rounded down, at least 1 for a present symbol; the remainder (either sign)
  // goes to / comes from the most frequent symbols, which changes their cost the least.
  int64_t sum = 0;
  for (int s = 0; s < alphabet; ++s) {
    if (counts[s] == 0) continue;
    const uint64_t share = static_cast<uint64_t>(counts[s]) * kProbScale / total;
    freqs[static_cast<std::size_t>(s)] = static_cast<uint16_t>(std::max<uint64_t>(share, 1));
    sum += freqs[static_cast<std::size_t>(s)];
  }
  std::vector<int> order;
  for (int s = 0; s < alphabet; ++s) {
    if (counts[s] != 0) order.push_back(s);
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return counts[a] > counts[b]; });
  if (sum < static_cast<int64_t>(kProbScale)) {
    freqs[static_cast<std::size_t>(order[0])] += static_cast<uint16_t>(kProbScale - sum);
  } else {
    // Each present symbol keeps >= 1 and at most 256 symbols are present, so this terminates.
    for (std::size_t i = 0; sum > static_cast<int64_t>(kProbScale); i = (i + 1) % order.size()) {
      uint16_t& f = freqs[static_cast<std::size_t>(order[i])];
      const int64_t take = std::min<int64_t>(f - 1, sum - kProbScale);
      f = static_cast<uint16_t>(f - take);
      sum -= take;
    }
  }
  return freqs;
}

namespace {
void cumulative(const uint16_t* freqs, int alphabet, uint32_t* cum) {
  uint32_t c = 0;
  for (int s = 0; s < alphabet; ++s) {
    cum[s] = c;
    c += freqs[s];
  }
}
}  // namespace

std::size_t rans_encode(const uint8_t* symbols, std::size_t n, const uint16_t* freqs, int alphabet,
                        std::vector<uint8_t>& out) {
  uint32_t cum[256] = {};
  cumulative(freqs, alphabet, cum);
  // Bytes come out last-first; collected reversed, then appended in reading order.
  thread_local std::vector<uint8_t> reversed;
  reversed.clear();
  uint32_t x = kRansLow;
  for (std::size_t i = n; i-- > 0;) {
    const uint8_t s = symbols[i];
    if (s >= alphabet || freqs[s] == 0) {
      throw base::InvalidArgument("rans_encode: symbol " + std::to_string(s) + " has no frequency");
    }
    const uint32_t f = freqs[s];
    // Renormalise so the encoded state lands back in [kRansLow, 256 * kRansLow).
    const uint32_t x_max = ((kRansLow >> kProbBits) << 8) * f;
    while (x >= x_max) {
      reversed.push_back(static_cast<uint8_t>(x & 0xff));
      x >>= 8;
    }
    x = ((x / f) << kProbBits) + (x % f) + cum[s];
  }
  for (int k = 0; k < 4; ++k) {  // the final state, read first by the decoder (most significant last)
    reversed.push_back(static_cast<uint8_t>(x >> (8 * k)));
  }
  out.insert(out.end(), reversed.rbegin(), reversed.rend());
  return reversed.size();
}

void rans_decode(const uint8_t* bytes, std::size_t size, const uint16_t* freqs, int alphabet, std::size_t n,
                 uint8_t* symbols) {
  uint32_t cum[256] = {};
  cumulative(freqs, alphabet, cum);
  if (alphabet < 1 || alphabet > 256 || cum[alphabet - 1] + freqs[alphabet - 1] != kProbScale) {
    throw base::FormatError("rans_decode: frequency table does not sum to " + std::to_string(kProbScale));
  }
  // slot -> symbol over the kProbScale slots (one byte each: 4 KiB per call, cheaper to fill
  // than a search per symbol).
  thread_local uint8_t slot_symbol[kProbScale];
  for (int s = 0; s < alphabet; ++s) std::fill_n(slot_symbol + cum[s], freqs[s], static_cast<uint8_t>(s));
  if (size < 4) throw base::FormatError("rans_decode: stream shorter than its state");
  std::size_t p = 0;
  uint32_t x = 0;
  for (int k = 0; k < 4; ++k) x = (x << 8) | bytes[p++];
  for (std::size_t i = 0; i < n; ++i) {
    const uint32_t slot = x & (kProbScale - 1);
    const uint8_t s = slot_symbol[slot];
    symbols[i] = s;
    x = freqs[s] * (x >> kProbBits) + slot - cum[s];
    while (x < kRansLow) {
      if (p >= size) throw base::FormatError("rans_decode: stream ends early");
      x = (x << 8) | bytes[p++];
    }
  }
  if (x != kRansLow || p != size) throw base::FormatError("rans_decode: corrupted stream");
}

double order0_entropy_bits(const uint32_t* counts, int alphabet) {
  double n = 0;
  for (int s = 0; s < alphabet; ++s) n += counts[s];
  double bits = 0;
  for (int s = 0; s < alphabet; ++s) {
    if (counts[s] > 0) bits -= counts[s] * std::log2(counts[s] / n);
  }
  return bits;
}

}  // namespace veloxquant::core
