// comm_vq against an independent reference written from its card (docs/methods/comm_vq.md): the
// test unpacks the stored key codes, looks the codewords up and compares with the fetched keys;
// checks every sub-vector took its nearest codeword; runs plain softmax attention over the
// decoded keys and exact values against the fused path (lookup tables on and off); pins the
// exact bytes, the trim, the save/restore round trip and the option errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "base/error.h"
#include "support/allocation_counter.h"
#include "support/kv_test_data.h"
#include "support/option_error.h"
#include "support/reference_attention.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

uint32_t unpack(const std::vector<float>& bytes, std::size_t base, int t, int bits) {
  uint32_t code = 0;
  for (int i = 0; i < bits; ++i) {
    const int bit = t * bits + i;
    code |= uint32_t{(static_cast<uint32_t>(bytes[base + bit / 8]) >> (bit % 8)) & 1u} << i;
  }
  return code;
}

// Sub-vector x (sub floats) stored as `code` in a book of 2^bits words (word e at words + e * sub):
// the code's word is the nearest (within 1e-3 of the best squared distance) and `fetched` is it.
void expect_nearest_code(const float* x, const float* fetched, const float* words, int bits, int64_t sub,
                         uint32_t code) {
  double best = std::numeric_limits<double>::max(), chosen = 0;
  for (int64_t e = 0; e < (int64_t{1} << bits); ++e) {
    double dist = 0;
    for (int64_t c = 0; c < sub; ++c) {
      const double diff = x[c] - words[e * sub + c];
      dist += diff * diff;
    }
    best = std::min(best, dist);
    if (e == code) chosen = dist;
  }
  EXPECT_LE(chosen, best + 1e-3);
  for (int64_t c = 0; c < sub; ++c) EXPECT_EQ(fetched[c], words[code * sub + c]);
}

TEST(CommVq, StoredCodesDecodeToTheFetchedKeysAndAreNearest) {
  const int64_t heads = 2, d = 32, t = 300;
  for (const auto& [bits, books] : {std::tuple{8, 4}, std::tuple{5, 8}, std::tuple{12, 2}}) {
    const lm::Tensor k = test_support::random_kv(1, heads, t, d, 21, lm::DType::F32);
    const lm::Tensor v = test_support::random_kv(1, heads, t, d, 22, lm::DType::F32);
    CommVqCache cache(bits, books, 5, 42);
    const lm::KeysValues kv = cache.update_and_fetch(k, v);
    const pvq::ProductCodebook& book = *cache.codebook();
    const std::vector<float> fk = kv.keys.to_f32(), raw = k.to_f32();
    EXPECT_EQ(kv.values.to_f32(), v.to_f32());
    const std::vector<float> codes = cache.key_codes().astype(lm::DType::F32).to_f32();
    const int64_t width = cache.key_codes().dim(3), cap = cache.key_codes().dim(2), sub = d / books;
    EXPECT_EQ(width, (books * bits + 7) / 8);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t j = 0; j < t; ++j) {
        const std::size_t base = static_cast<std::size_t>((h * cap + j) * width);
        for (int s = 0; s < books; ++s) {
          const int64_t at = (h * t + j) * d + s * sub;
          expect_nearest_code(raw.data() + at, fk.data() + at, book.words.data() + s * (int64_t{1} << bits) * sub, bits,
                              sub, unpack(codes, base, s, bits));
        }
      }
    }
  }
}

TEST(CommVq, FusedAttentionEqualsPlainSoftmaxOverDecodedKeys) {
  const int64_t heads = 2, hq = 6;
  for (const LutChoice lut : {LutChoice::automatic, LutChoice::always, LutChoice::never}) {
    for (const auto& [bits, books, d] : {std::tuple{8, 4, 64}, std::tuple{6, 8, 32}, std::tuple{10, 4, 32}}) {
      CommVqCache fused(bits, books, 4, 42), plain(bits, books, 4, 42);
      fused.set_lut_choice(lut);
      int64_t first = 0;
      uint64_t seed = 300;
      for (int64_t n : {300, 17, 1, 1, 40}) {
        const lm::Tensor k = test_support::random_kv(1, heads, n, d, seed++, lm::DType::F32);
        const lm::Tensor v = test_support::random_kv(1, heads, n, d, seed++, lm::DType::F32);
        const lm::Tensor q = test_support::random_kv(1, hq, n, d, seed++, lm::DType::F32);
        lm::Tensor out({1, hq, n, d}, lm::DType::F32);
        const float scale = 1.0f / std::sqrt(float(d));
        fused.fused_attention({&q, &k, &v, scale, std::nullopt}, out);
        const std::vector<float> want =
            test_support::reference_attention(plain.update_and_fetch(k, v), q.to_f32(), hq, n, first, scale);
        const std::vector<float> got = out.to_f32();
        float worst = 0;
        for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
        EXPECT_LE(worst, 2e-3f) << "bits " << bits << " books " << books << " call of " << n;
        first += n;
      }
    }
  }
}

TEST(CommVq, BytesAreTheLayoutAndReallyAllocated) {
  const int64_t h = 2, d = 64;
  const auto before = test_support::allocation_snapshot();
  KVCacheConfig c;
  c.method = "comm_vq";
  c.head_dim = d;
  auto cache = KVCacheBuilder(c).build().serving();  // defaults: 4 codebooks of 256, 20 EM iterations
  for (int i = 0; i < 3; ++i) {
    cache->update_and_fetch(test_support::random_kv(1, h, 100, d, i), test_support::random_kv(1, h, 100, d, i + 9));
  }
  const auto after = test_support::allocation_snapshot();
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache->nbytes());
  // 300 rows in a 512-row allocation: 4 code bytes per key, f16 values, 4 x 256 x 16 f32 codewords.
  EXPECT_EQ(cache->nbytes(), h * 512 * 4 + h * 512 * d * 2 + int64_t{4} * 256 * 16 * 4);
}

TEST(CommVq, TrimKeepsThePrefixAndStateRoundTrips) {
  const int64_t heads = 2, d = 32;
  CommVqCache cache(8, 4, 5, 42);
  const lm::KeysValues before =
      cache.update_and_fetch(test_support::random_kv(1, heads, 70, d, 5), test_support::random_kv(1, heads, 70, d, 6));
  EXPECT_EQ(cache.trim(25), 25);
  auto restored = comm_vq_method().make_restorable();
  restored->from_state(cache.state(), cache.meta_state());
  auto copy = cache.clone();
  const lm::Tensor nk = test_support::random_kv(1, heads, 3, d, 7), nv = test_support::random_kv(1, heads, 3, d, 8);
  const lm::KeysValues a = cache.update_and_fetch(nk, nv);
  const std::vector<float> bk = before.keys.to_f32(), ak = a.keys.to_f32();
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < 45; ++j) {
      for (int64_t c = 0; c < d; ++c) EXPECT_EQ(ak[(h * 48 + j) * d + c], bk[(h * 70 + j) * d + c]);
    }
  }
  const lm::KeysValues b = restored->update_and_fetch(nk, nv);
  const lm::KeysValues c = copy->update_and_fetch(nk, nv);
  EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
  EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
  EXPECT_EQ(a.keys.to_f32(), c.keys.to_f32());
  EXPECT_EQ(cache.trim(1000), 48);
  EXPECT_TRUE(cache.empty());
  EXPECT_EQ(cache.codebook(), nullptr);
  EXPECT_THROW(restored->from_state({}, copy->meta_state()), base::FormatError);  // offset 48, no tensors
}

TEST(CommVq, BadOptionsNameTheField) {
  const auto error = [](const std::function<void(CommVqOptions&)>& change) {
    return test_support::option_error<CommVqOptions>("comm_vq", change, 64);
  };
  EXPECT_NE(error([](CommVqOptions& o) { o.comm_vq_n_codebooks = 3; }).find("comm_vq_n_codebooks"), std::string::npos);
  EXPECT_NE(error([](CommVqOptions& o) { o.comm_vq_bits = 0; }).find("comm_vq_bits"), std::string::npos);
  EXPECT_NE(error([](CommVqOptions& o) { o.comm_vq_bits = 17; }).find("comm_vq_bits"), std::string::npos);
  EXPECT_NE(error([](CommVqOptions& o) { o.comm_vq_n_em_iters = 0; }).find("comm_vq_n_em_iters"), std::string::npos);
  EXPECT_EQ(error([](CommVqOptions&) {}), "accepted");
}

}  // namespace
}  // namespace veloxquant
