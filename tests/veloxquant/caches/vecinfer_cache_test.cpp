// vecinfer against an independent reference written from its card (docs/methods/vecinfer.md):
// the test unpacks the stored codes itself (LSB-first bit packing), looks the codewords up, undoes
// the Hadamard rotation with a plain butterfly and the smoothing, and compares with what the cache
// fetches; checks every coded sub-vector took its nearest codeword; runs plain softmax attention
// over the decoded rows against the fused path (lookup tables on and off); pins the exact bytes,
// the trim, the save/restore round trip and the option errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <utility>

#include "base/error.h"
#include "support/allocation_counter.h"
#include "support/kv_test_data.h"
#include "support/option_error.h"
#include "support/reference_attention.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

void plain_fwht(std::vector<float>& x) {
  for (std::size_t h = 1; h < x.size(); h *= 2) {
    for (std::size_t i = 0; i < x.size(); i += 2 * h) {
      for (std::size_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
}

uint32_t unpack(const uint8_t* row, int t, int bits) {
  uint32_t code = 0;
  for (int i = 0; i < bits; ++i) {
    const int bit = t * bits + i;
    code |= uint32_t{(row[bit / 8] >> (bit % 8)) & 1u} << i;
  }
  return code;
}

// Head h's first `rows` coded rows, decoded the plain way ([rows, d] f32, model basis).
std::vector<float> reference_decode(const VecInferCache& cache, bool keys, int64_t h, int64_t rows) {
  const VecInferCodec& codec = *cache.codec();
  const pvq::ProductCodebook& book = keys ? codec.keys : codec.values;
  const lm::Tensor& codes = keys ? cache.key_codes() : cache.value_codes();
  const int64_t d = book.dim(), width = codes.dim(3);
  const std::vector<float> all = codes.astype(lm::DType::F32).to_f32();
  std::vector<float> out;
  for (int64_t j = 0; j < rows; ++j) {
    std::vector<uint8_t> row(static_cast<std::size_t>(width));
    for (int64_t c = 0; c < width; ++c) row[c] = static_cast<uint8_t>(all[(h * codes.dim(2) + j) * width + c]);
    std::vector<float> x(static_cast<std::size_t>(d));
    for (int t = 0; t < book.n_sub; ++t) {
      const uint32_t k = unpack(row.data(), t, book.bits);
      for (int e = 0; e < book.sub; ++e) {
        x[t * book.sub + e] = book.words[((book.shared ? 0 : t) * book.entries() + k) * book.sub + e];
      }
    }
    if (keys) {
      plain_fwht(x);
      for (int64_t i = 0; i < d; ++i) x[i] *= codec.basis.smooth()[i] / std::sqrt(float(d));
    }
    out.insert(out.end(), x.begin(), x.end());
  }
  return out;
}

// Sub-vector x's (4 floats) squared distance to word `code` of the book, and the least over all
// its words.
std::pair<double, double> chosen_and_best(const float* x, const pvq::ProductCodebook& book, uint32_t code) {
  double best = std::numeric_limits<double>::max(), chosen = 0;
  for (int64_t e = 0; e < book.entries(); ++e) {
    double dist = 0;
    for (int c = 0; c < 4; ++c) {
      const double diff = x[c] - book.words[e * 4 + c];
      dist += diff * diff;
    }
    best = std::min(best, dist);
    if (e == code) chosen = dist;
  }
  return {chosen, best};
}

TEST(VecInfer, StoredCodesDecodeToTheFetchedRowsAndAreNearest) {
  const int64_t heads = 2, d = 32, t = 70, window = 16;
  const lm::Tensor k = test_support::random_kv(1, heads, t, d, 11, lm::DType::F32);
  const lm::Tensor v = test_support::random_kv(1, heads, t, d, 12, lm::DType::F32);
  VecInferCache cache(4, 8, 8, 6, window, 42);
  const lm::KeysValues kv = cache.update_and_fetch(k, v);
  ASSERT_EQ(cache.frontier(), 64);
  const std::vector<float> fk = kv.keys.to_f32(), fv = kv.values.to_f32(), raw_k = k.to_f32(), raw_v = v.to_f32();
  const VecInferCodec& codec = *cache.codec();
  for (int64_t h = 0; h < heads; ++h) {
    const std::vector<float> dk = reference_decode(cache, true, h, 64), dv = reference_decode(cache, false, h, 64);
    for (int64_t j = 0; j < t; ++j) {
      for (int64_t c = 0; c < d; ++c) {
        const std::size_t i = static_cast<std::size_t>((h * t + j) * d + c);
        if (j < 64) {
          EXPECT_NEAR(fk[i], dk[j * d + c], 1e-4f);
          EXPECT_NEAR(fv[i], dv[j * d + c], 1e-6f);
        } else {  // the window: as given
          EXPECT_EQ(fk[i], raw_k[i]);
          EXPECT_EQ(fv[i], raw_v[i]);
        }
      }
    }
    // Nearest codeword: the smoothed, rotated key's sub-vectors against every key codeword.
    const std::vector<float> codes = cache.key_codes().astype(lm::DType::F32).to_f32();
    const int64_t width = cache.key_codes().dim(3);
    for (int64_t j = 0; j < 64; ++j) {
      std::vector<float> x(static_cast<std::size_t>(d));
      for (int64_t c = 0; c < d; ++c) x[c] = raw_k[(h * t + j) * d + c] / codec.basis.smooth()[c];
      plain_fwht(x);
      for (float& e : x) e /= std::sqrt(float(d));
      std::vector<uint8_t> row(static_cast<std::size_t>(width));
      for (int64_t c = 0; c < width; ++c)
        row[c] = static_cast<uint8_t>(codes[(h * cache.key_codes().dim(2) + j) * width + c]);
      for (int s = 0; s < codec.keys.n_sub; ++s) {
        const auto [chosen, best] =
            chosen_and_best(x.data() + std::ptrdiff_t{4} * s, codec.keys, unpack(row.data(), s, codec.keys.bits));
        EXPECT_LE(chosen, best + 1e-4) << "row " << j << " sub-vector " << s;
      }
    }
  }
}

TEST(VecInfer, FusedAttentionEqualsPlainSoftmaxOverDecodedRows) {
  const int64_t heads = 2;
  // GQA groups of 1, 3 and 8 query heads per kv head (the codeword kernels take queries in
  // blocks of 3 and 16).
  for (const int64_t hq : {2, 6, 16})
    for (const LutChoice lut : {LutChoice::automatic, LutChoice::always, LutChoice::never}) {
      for (const auto& [key_bits, d, window] : {std::tuple{8, 32, 16}, std::tuple{6, 64, 1}, std::tuple{12, 64, 32}}) {
        VecInferCache fused(4, 8, key_bits, 8, window, 42), plain(4, 8, key_bits, 8, window, 42);
        fused.set_lut_choice(lut);
        int64_t first = 0;
        uint64_t seed = 900;
        for (int64_t n : {150, 17, 1, 1, 40}) {
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
          EXPECT_LE(worst, 2e-3f) << "bits " << key_bits << " d " << d << " call of " << n << " hq " << hq;
          first += n;
        }
      }
    }
}

TEST(VecInfer, BytesAreTheLayoutAndReallyAllocated) {
  const int64_t h = 2, d = 64;
  const auto before = test_support::allocation_snapshot();
  KVCacheConfig c;
  c.method = "vecinfer";
  c.head_dim = d;
  auto cache = KVCacheBuilder(c).build().serving();  // defaults: keys 4-dim / 12 bits, values 8-dim / 8 bits, R 128
  for (int i = 0; i < 3; ++i) {
    cache->update_and_fetch(test_support::random_kv(1, h, 100, d, i), test_support::random_kv(1, h, 100, d, i + 9));
  }
  const auto after = test_support::allocation_snapshot();
  const std::size_t books = 4096 * 4 * 4 + 8 * 256 * 8 * 4 + d * 4;  // key book, 8 value books, smoothing
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache->nbytes());
  // 300 tokens: 256 coded (one 256-row allocation), 44 in the f16 window of 128 rows.
  const std::size_t key_codes = h * 256 * 24;   // 16 codes x 12 bits
  const std::size_t value_codes = h * 256 * 8;  // 8 codes x 8 bits
  const std::size_t window = 2 * h * 128 * d * 2;
  EXPECT_EQ(cache->nbytes(), key_codes + value_codes + window + books);
}

TEST(VecInfer, TrimReopensTheWindowFromItsCodes) {
  const int64_t heads = 2, d = 32, t = 70;
  const lm::Tensor k = test_support::random_kv(1, heads, t, d, 81, lm::DType::F32);
  const lm::Tensor v = test_support::random_kv(1, heads, t, d, 82, lm::DType::F32);
  VecInferCache cache(4, 8, 8, 8, 16, 42);
  const lm::KeysValues before = cache.update_and_fetch(k, v);
  EXPECT_EQ(cache.trim(25), 25);
  EXPECT_EQ(cache.offset(), 45);
  EXPECT_EQ(cache.frontier(), 32);
  // Two more rows (47 < 48: no flush), so every row is still as the cache held it.
  const lm::Tensor nk = test_support::random_kv(1, heads, 2, d, 83, lm::DType::F32);
  const lm::Tensor nv = test_support::random_kv(1, heads, 2, d, 84, lm::DType::F32);
  const lm::KeysValues after = cache.update_and_fetch(nk, nv);
  // Rows 0..44 as the cache had them (decoded or exact), then the new rows as given.
  const std::vector<float> bk = before.keys.to_f32(), ak = after.keys.to_f32(), nkf = nk.to_f32();
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < 47; ++j) {
      for (int64_t c = 0; c < d; ++c) {
        const float want = j < 45 ? bk[(h * t + j) * d + c] : nkf[(h * 2 + j - 45) * d + c];
        EXPECT_NEAR(ak[(h * 47 + j) * d + c], want, 1e-5f);
      }
    }
  }
  EXPECT_EQ(cache.trim(1000), 47);
  EXPECT_TRUE(cache.empty());
  EXPECT_EQ(cache.codec(), nullptr);
}

TEST(VecInfer, StateRoundTripAndCloneContinueIdentically) {
  const int64_t heads = 2, d = 32;
  VecInferCache cache(4, 8, 8, 8, 16, 42);
  cache.update_and_fetch(test_support::random_kv(1, heads, 70, d, 5), test_support::random_kv(1, heads, 70, d, 6));
  auto restored = vecinfer_method().make_restorable();
  restored->from_state(cache.state(), cache.meta_state());
  auto copy = cache.clone();
  EXPECT_EQ(restored->offset(), 70);
  EXPECT_EQ(restored->nbytes(), cache.nbytes() - (256 - 64) * heads * (8 + 4));  // restored: exactly 64 coded rows
  const lm::Tensor nk = test_support::random_kv(1, heads, 20, d, 7), nv = test_support::random_kv(1, heads, 20, d, 8);
  const lm::KeysValues a = cache.update_and_fetch(nk, nv);
  const lm::KeysValues b = restored->update_and_fetch(nk, nv);
  const lm::KeysValues c = copy->update_and_fetch(nk, nv);
  EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
  EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
  EXPECT_EQ(a.keys.to_f32(), c.keys.to_f32());
  // Before the first flush: no codebooks, still restorable.
  VecInferCache young(4, 8, 8, 8, 16, 42);
  young.update_and_fetch(test_support::random_kv(1, heads, 5, d, 9), test_support::random_kv(1, heads, 5, d, 10));
  auto again = vecinfer_method().make_restorable();
  again->from_state(young.state(), young.meta_state());
  EXPECT_EQ(again->offset(), 5);
  EXPECT_THROW(again->from_state(cache.state(), young.meta_state()), base::FormatError);
}

TEST(VecInfer, BadOptionsNameTheField) {
  const auto error = [](const std::function<void(VecInferOptions&)>& change) {
    return test_support::option_error<VecInferOptions>("vecinfer", change, 64);
  };
  EXPECT_NE(error([](VecInferOptions& o) { o.key_sub_dim = 3; }).find("key_sub_dim"), std::string::npos);
  EXPECT_NE(error([](VecInferOptions& o) { o.value_sub_dim = 5; }).find("value_sub_dim"), std::string::npos);
  EXPECT_NE(error([](VecInferOptions& o) { o.key_codebook_bits = 17; }).find("key_codebook_bits"), std::string::npos);
  EXPECT_NE(error([](VecInferOptions& o) { o.value_codebook_bits = 0; }).find("value_codebook_bits"),
            std::string::npos);
  EXPECT_EQ(error([](VecInferOptions&) {}), "accepted");
  KVCacheConfig c;
  c.method = "vecinfer";
  c.head_dim = 64;
  c.kivi.residual_length = -1;
  EXPECT_THROW(KVCacheBuilder(c).build(), QuantizerConfigError);
  EXPECT_THROW(VecInferCache(4, 8, 12, 8, -1, 0), QuantizerConfigError);
  // A head_dim the sub-vectors do not divide, met only when the keys arrive.
  VecInferCache odd(4, 8, 8, 8, 16, 0);
  try {
    odd.update_and_fetch(test_support::random_kv(1, 1, 2, 36, 1), test_support::random_kv(1, 1, 2, 36, 2));
    ADD_FAILURE() << "head_dim 36 accepted";
  } catch (const QuantizerConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim 36"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace veloxquant
