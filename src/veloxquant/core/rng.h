#pragma once
// Seeded random numbers that give the same stream on every platform and compiler.
//
// Generator: xoshiro256** (Blackman & Vigna, 2018), its 256-bit state filled from the seed
// by SplitMix64 (Steele, Lea & Flood, 2014), exactly as the xoshiro authors recommend. Both
// are pure 64-bit integer arithmetic, so the integer stream is bit-identical everywhere.
// We do not use <random>'s distributions: std::normal_distribution and
// std::uniform_real_distribution are implementation-defined and differ between libstdc++,
// libc++ and MSVC, which would make a seed mean different rotations on different machines.
//
// Derived draws:
//   uniform()  = (next() >> 11) * 2^-53            (exact dyadic in [0, 1))
//   normal()   = Marsaglia's polar method on two uniforms in (-1, 1); it needs only sqrt
//                (correctly rounded by IEEE 754) and log (glibc's is correctly rounded in
//                practice), no sin/cos, so normals agree to the last bit wherever log does.
//   sign()     = top bit of next(): +1 or -1.
//   below(n)   = Lemire's nearly-divisionless bounded integer, unbiased.
#include <cstdint>

namespace veloxquant::core {

// SplitMix64: a 64-bit counter passed through a strong mixer. Used to seed xoshiro and to
// derive independent sub-seeds (rotation, JL matrix, ...) from one user seed.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();

 private:
  uint64_t state_;
};

class Rng {
 public:
  explicit Rng(uint64_t seed);
  // A generator with an explicit xoshiro state (not all zero): for checking the stream
  // against the published xoshiro256** test vectors.
  static Rng from_state(uint64_t s0, uint64_t s1, uint64_t s2, uint64_t s3);

  uint64_t next();                 // raw xoshiro256** output
  double uniform();                // [0, 1), 53 random bits
  double normal();                 // N(0, 1)
  int sign();                      // +1 or -1 with probability 1/2 each
  uint64_t below(uint64_t bound);  // uniform integer in [0, bound); bound must be > 0

 private:
  Rng() = default;
  uint64_t s_[4] = {0, 0, 0, 0};
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// A sub-seed for a named purpose, so that e.g. the rotation and the JL matrix of one
// quantizer are independent streams even though both come from the user's single seed.
uint64_t derive_seed(uint64_t seed, uint64_t purpose);

}  // namespace veloxquant::core
