#include "veloxquant/core/rng.h"

#include <cmath>

namespace veloxquant::core {

uint64_t SplitMix64::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

namespace {
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(uint64_t seed) {
  SplitMix64 mixer(seed);
  for (auto& word : s_) word = mixer.next();
  // SplitMix64 never yields four zero words in a row, so the all-zero state (the one
  // xoshiro cannot leave) is impossible.
}

Rng Rng::from_state(uint64_t s0, uint64_t s1, uint64_t s2, uint64_t s3) {
  Rng rng;
  rng.s_[0] = s0;
  rng.s_[1] = s1;
  rng.s_[2] = s2;
  rng.s_[3] = s3;
  return rng;
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double Rng::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double u, v, s;
  do {
    u = 2.0 * uniform() - 1.0;
    v = 2.0 * uniform() - 1.0;
    s = u * u + v * v;
  } while (s >= 1.0 || s == 0.0);
  const double factor = std::sqrt(-2.0 * std::log(s) / s);
  spare_ = v * factor;
  has_spare_ = true;
  return u * factor;
}

int Rng::sign() { return (next() >> 63) ? -1 : 1; }

uint64_t Rng::below(uint64_t bound) {
  // Lemire (2019), "Fast random integer generation in an interval": multiply-shift with a
  // rejection step that removes the bias of the low product.
  uint64_t x = next();
  __uint128_t m = static_cast<__uint128_t>(x) * bound;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    const uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      x = next();
      m = static_cast<__uint128_t>(x) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

uint64_t derive_seed(uint64_t seed, uint64_t purpose) {
  SplitMix64 mixer(seed ^ (purpose * 0xd1b54a32d192ed03ULL));
  return mixer.next();
}

}  // namespace veloxquant::core
