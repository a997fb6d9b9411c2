// a2ats against an independent brute-force reference written from its card (docs/methods/a2ats.md):
// the rows past the newest a2ats_window are far rows, each key one nearest centroid per sub-vector;
// a call scores every far row as the sum of <q_m, centroid> over sub-vectors, sums the softmax of
// those scores over the kv head's query heads and the call's queries, keeps the
// max(ceil(fraction * far), window) rows of most mass (ties to the older row), and attends over
// them (values exact), the window and its own rows (exact, causal). The codebook is checked as
// the library's k-means of the first spill's rows with the reference's own KaQ weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/half.h"
#include "support/allocation_counter.h"
#include "support/kv_test_data.h"
#include "support/option_error.h"
#include "veloxquant/core/kmeans.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

struct Fed {
  int64_t heads, d;
  std::vector<std::vector<float>> k, v;  // per head, rows appended
  void add(const lm::Tensor& keys, const lm::Tensor& values) {
    const int64_t s = keys.dim(2);
    const std::vector<float> kf = keys.to_f32(), vf = values.to_f32();
    for (int64_t h = 0; h < heads; ++h) {
      k[h].insert(k[h].end(), kf.begin() + h * s * d, kf.begin() + (h + 1) * s * d);
      v[h].insert(v[h].end(), vf.begin() + h * s * d, vf.begin() + (h + 1) * s * d);
    }
  }
};

// Key row j of head h as the cache's codes say, through the cache's own (f16) centroids.
std::vector<float> decoded_key(const A2atsCache& cache, int64_t h, int64_t j, int64_t d, int64_t sub) {
  std::vector<float> out;
  const uint8_t* code = cache.codes(0, h, j);
  for (int64_t m = 0; m < d / sub; ++m) {
    const std::vector<float> c = cache.centroid(m, code[m]);
    out.insert(out.end(), c.begin(), c.end());
  }
  return out;
}

A2atsParams small_params() {
  A2atsParams p;
  p.codebook_bits = 4;
  p.sub_dim = 4;
  p.window = 4;
  p.retrieval_fraction = 0.25;
  p.seed = 7;
  return p;
}

// One query's softmax over the far rows' decoded keys (fk) at `scale`, added to each row's mass.
void add_far_mass(const float* qi, const std::vector<std::vector<float>>& fk, float scale, std::vector<double>& mass) {
  const int64_t far = static_cast<int64_t>(fk.size());
  std::vector<double> l(static_cast<std::size_t>(far));
  double mx = -1e300, sum = 0;
  for (int64_t j = 0; j < far; ++j) {
    double dot = 0;
    for (std::size_t e = 0; e < fk[j].size(); ++e) dot += double(qi[e]) * fk[j][e];
    l[j] = dot * scale;
    mx = std::max(mx, l[j]);
  }
  for (double& x : l) sum += (x = std::exp(x - mx));
  for (int64_t j = 0; j < far; ++j) mass[j] += l[j] / sum;
}

// Exact attention of query qi over (key, value) rows at `scale`, in double: the largest
// |output - got| over the d channels.
double attention_error(const float* qi, std::span<const std::pair<const float*, const float*>> kv, float scale,
                       const float* got, int64_t d) {
  std::vector<std::pair<double, const float*>> rows;  // (logit, value row)
  rows.reserve(kv.size());
  for (const auto& [key, value] : kv) {
    double dot = 0;
    for (int64_t e = 0; e < d; ++e) dot += double(qi[e]) * key[e];
    rows.emplace_back(dot * scale, value);
  }
  double mx = -1e300, sum = 0;
  for (const auto& r : rows) mx = std::max(mx, r.first);
  std::vector<double> o(static_cast<std::size_t>(d), 0.0);
  for (const auto& r : rows) {
    const double w = std::exp(r.first - mx);
    sum += w;
    for (int64_t e = 0; e < d; ++e) o[e] += w * r.second[e];
  }
  double worst = 0;
  for (int64_t e = 0; e < d; ++e) worst = std::max(worst, std::fabs(o[e] / sum - got[e]));
  return worst;
}

// The index of sub-vector position m's centroid nearest to x (sub_dim floats; the first on ties).
int nearest_centroid(const A2atsCache& cache, int64_t m, const float* x, int64_t sub_dim) {
  double best = 1e300;
  int best_c = -1;
  for (int c = 0; c < 16; ++c) {
    const std::vector<float> cen = cache.centroid(m, c);
    double dist = 0;
    for (int64_t e = 0; e < sub_dim; ++e) {
      const double diff = x[e] - cen[e];
      dist += diff * diff;
    }
    if (dist < best) best = dist, best_c = c;
  }
  return best_c;
}

// The retrieval and the attention after it against brute force, for `hq` query heads over
// `heads` kv heads.
void check_brute_force_retrieval(int64_t heads, int64_t hq) {
  const int64_t d = 16, group = hq / heads;
  const A2atsParams p = small_params();
  A2atsCache cache(p);
  Fed fed{heads, d, std::vector<std::vector<float>>(heads), std::vector<std::vector<float>>(heads)};
  uint64_t seed = 100;
  int64_t offset = 0, checked_selection = 0;
  for (int64_t s : {40, 5, 1, 1, 30, 1, 1}) {
    const lm::Tensor k = test_support::random_kv(1, heads, s, d, seed++, lm::DType::F32);
    const lm::Tensor v = test_support::random_kv(1, heads, s, d, seed++, lm::DType::F32);
    const lm::Tensor q = test_support::random_kv(1, hq, s, d, seed++, lm::DType::F32);
    const float scale = 0.25f;
    lm::Tensor out({1, hq, s, d}, lm::DType::F32);
    const int64_t far = std::max<int64_t>(0, offset - p.window), tail = offset - far;
    cache.fused_attention({&q, &k, &v, scale, std::nullopt}, out);
    const std::vector<float> qf = q.to_f32(), kf = k.to_f32(), vf = v.to_f32(), got = out.to_f32();
    const int64_t want_k =
        far == 0 ? 0 : std::min<int64_t>(far, std::max<int64_t>(int64_t(std::ceil(0.25 * far)), p.window));
    double worst = 0;
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<std::vector<float>> fk(static_cast<std::size_t>(far));
      for (int64_t j = 0; j < far; ++j) fk[j] = decoded_key(cache, h, j, d, p.sub_dim);
      // Retrieval by approximate attention mass.
      std::vector<double> mass(static_cast<std::size_t>(far), 0.0);
      for (int64_t g = 0; g < group && far > 0; ++g) {
        for (int64_t i = 0; i < s; ++i) add_far_mass(&qf[((h * group + g) * s + i) * d], fk, scale, mass);
      }
      std::vector<int32_t> order(static_cast<std::size_t>(far));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return mass[a] > mass[b]; });
      std::vector<int32_t> chosen(order.begin(), order.begin() + want_k);
      std::sort(chosen.begin(), chosen.end());
      const std::vector<int32_t>& used = cache.last_positions(0, h);
      ASSERT_EQ(used.size(), static_cast<std::size_t>(want_k + tail + s));
      EXPECT_TRUE(std::equal(chosen.begin(), chosen.end(), used.begin())) << "chunk " << s << " head " << h;
      if (want_k < far) ++checked_selection;
      // Attention over (key, value) rows: the chosen far rows (decoded keys), the tail, the call's.
      std::vector<std::pair<const float*, const float*>> held;
      held.reserve(chosen.size() + static_cast<std::size_t>(offset - far + s));
      for (int32_t j : chosen) held.emplace_back(fk[j].data(), &fed.v[h][j * d]);
      for (int64_t t = far; t < offset; ++t) held.emplace_back(&fed.k[h][t * d], &fed.v[h][t * d]);
      for (int64_t t = 0; t < s; ++t) held.emplace_back(&kf[(h * s + t) * d], &vf[(h * s + t) * d]);
      const std::size_t before_call = held.size() - static_cast<std::size_t>(s);
      for (int64_t g = 0; g < group; ++g) {
        for (int64_t i = 0; i < s; ++i) {
          const int64_t at = ((h * group + g) * s + i) * d;
          // Query i sees the held rows and the call's rows up to its own.
          const std::span<const std::pair<const float*, const float*>> seen(
              held.data(), before_call + static_cast<std::size_t>(i) + 1);
          worst = std::max(worst, attention_error(&qf[at], seen, scale, &got[at], d));
        }
      }
    }
    EXPECT_LE(worst, 2e-4) << "chunk of " << s;
    fed.add(k, v);
    offset += s;
    // Every far row's codes are its key's nearest centroids (ties low).
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t j = 0; j < cache.far_rows(); ++j) {
        for (int64_t m = 0; m < d / p.sub_dim; ++m) {
          ASSERT_EQ(cache.codes(0, h, j)[m], nearest_centroid(cache, m, &fed.k[h][j * d + m * p.sub_dim], p.sub_dim))
              << "row " << j;
        }
      }
    }
  }
  EXPECT_EQ(cache.far_rows(), offset - p.window);
  EXPECT_GT(checked_selection, 0);  // some calls really chose
}

TEST(A2ats, FusedAttentionIsTheBruteForceRetrieval) { check_brute_force_retrieval(2, 6); }

// Groups wider than the interleaved tables' four lanes: one shared row pass for up to 16 query
// heads (6 here), one pass per head past that (18).
TEST(A2ats, WideGroupsRetrieveAsTheBruteForce) {
  check_brute_force_retrieval(2, 12);
  check_brute_force_retrieval(1, 18);
}

TEST(A2ats, CodebookIsKaqWeightedKMeansOfTheFirstSpill) {
  const int64_t heads = 2, d = 16, n = 40;
  for (const bool query_aware : {true, false}) {
    A2atsParams p = small_params();
    p.query_aware = query_aware;
    A2atsCache cache(p);
    const lm::Tensor k = test_support::random_kv(1, heads, n, d, 5, lm::DType::F32);
    cache.update_and_fetch(k, test_support::random_kv(1, heads, n, d, 6, lm::DType::F32));
    ASSERT_TRUE(cache.trained());
    const std::vector<float> kf = k.to_f32();
    // Weights: (1 - beta) + beta * n * share of KaQ mass, the newest `window` keys as queries.
    std::vector<float> w;
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<double> mass(n, 0.0);
      for (int64_t pq = n - p.window; pq < n; ++pq) {
        std::vector<double> l(n);
        double mx = -1e300, sum = 0;
        for (int64_t i = 0; i < n; ++i) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += double(kf[(h * n + pq) * d + e]) * kf[(h * n + i) * d + e];
          mx = std::max(mx, l[i] = dot / 4.0);
        }
        for (double& x : l) sum += (x = std::exp(x - mx));
        for (int64_t i = 0; i < n; ++i) mass[i] += l[i] / sum;
      }
      const double total = std::accumulate(mass.begin(), mass.end(), 0.0);
      for (int64_t i = 0; i < n; ++i) w.push_back(float(0.5 + 0.5 * n * mass[i] / total));
    }
    for (int64_t m = 0; m < d / p.sub_dim; ++m) {
      std::vector<float> x;
      for (int64_t r = 0; r < heads * n; ++r) {
        x.insert(x.end(), kf.begin() + r * d + m * p.sub_dim, kf.begin() + r * d + (m + 1) * p.sub_dim);
      }
      const core::KMeansResult fit = core::kmeans(x.data(), heads * n, p.sub_dim, 16, A2atsCache::kKMeansIterations,
                                                  7 + m, query_aware ? w.data() : nullptr);
      for (int64_t c = 0; c < 16; ++c) {
        const std::vector<float> got = cache.centroid(m, c);
        for (int64_t e = 0; e < p.sub_dim; ++e) {
          EXPECT_EQ(got[e], base::f16_to_f32(base::f32_to_f16(fit.centroids[c * p.sub_dim + e])))
              << "query_aware " << query_aware << " m " << m << " c " << c;
        }
      }
    }
  }
}

TEST(A2ats, FetchReturnsEveryRowWithFarKeysDecoded) {
  const int64_t heads = 2, d = 16;
  const A2atsParams p = small_params();
  A2atsCache cache(p);
  const lm::Tensor k = test_support::random_kv(1, heads, 30, d, 1, lm::DType::F32);
  const lm::Tensor v = test_support::random_kv(1, heads, 30, d, 2, lm::DType::F32);
  cache.update_and_fetch(k, v);
  const lm::Tensor k2 = test_support::random_kv(1, heads, 1, d, 3, lm::DType::F32);
  const lm::KeysValues got = cache.update_and_fetch(k2, test_support::random_kv(1, heads, 1, d, 4, lm::DType::F32));
  ASSERT_EQ(got.keys.shape(), (lm::Shape{1, heads, 31, d}));
  const std::vector<float> gk = got.keys.to_f32(), gv = got.values.to_f32(), kf = k.to_f32(), vf = v.to_f32();
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < 30; ++j) {
      // Before this call 26 rows were far; after it, 27 (row 26 spilled by this call).
      const std::vector<float> want =
          j < 26 ? decoded_key(cache, h, j, d, p.sub_dim)
                 : std::vector<float>(kf.begin() + (h * 30 + j) * d, kf.begin() + (h * 30 + j + 1) * d);
      for (int64_t e = 0; e < d; ++e) {
        EXPECT_EQ(gk[(h * 31 + j) * d + e], want[e]);
        EXPECT_EQ(gv[(h * 31 + j) * d + e], vf[(h * 30 + j) * d + e]);
      }
    }
  }
  EXPECT_EQ(cache.far_rows(), 27);
}

TEST(A2ats, BytesAreTheLayoutAndReallyAllocated) {
  const int64_t b = 1, h = 3, d = 64;
  const auto before = test_support::allocation_snapshot();
  KVCacheConfig c;
  c.method = "a2ats";
  c.head_dim = d;
  auto cache = KVCacheBuilder(c).build().serving();  // defaults: 8-bit codes over 8-wide sub-vectors, window 128
  for (int64_t s : {300, 1, 1}) {
    cache->update_and_fetch(test_support::random_kv(b, h, s, d, s), test_support::random_kv(b, h, s, d, s + 1));
  }
  const auto after = test_support::allocation_snapshot();
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache->nbytes());
  // 302 tokens: 174 far rows in a 256-row region, 128 exact rows (f16).
  const std::size_t heads = b * h, region = 256;
  const std::size_t codebook = (d / 8) * 256 * 8 * 2;  // f16, one per layer
  const std::size_t codes = heads * region * (d / 8);  // one byte per 8-wide sub-vector
  const std::size_t values = heads * region * d * 2;   // exact f16 values
  const std::size_t window = 2 * heads * 128 * d * 2;  // exact keys and values
  EXPECT_EQ(cache->nbytes(), codebook + codes + values + window);
  // Per far token and kv head at d = 64: 8 code bytes + 128 value bytes against 256 in f16.
  EXPECT_EQ((codes + values) / (heads * region), 136u);
}

TEST(A2ats, StateRoundTripAndCloneContinueIdentically) {
  const int64_t heads = 2, hq = 4, d = 16;
  A2atsCache cache(small_params());
  uint64_t seed = 50;
  const auto step = [&](lm::KVCache& c, int64_t s, uint64_t at) {
    const lm::Tensor k = test_support::random_kv(1, heads, s, d, at, lm::DType::F16);
    const lm::Tensor v = test_support::random_kv(1, heads, s, d, at + 1, lm::DType::F16);
    const lm::Tensor q = test_support::random_kv(1, hq, s, d, at + 2, lm::DType::F32);
    lm::Tensor out({1, hq, s, d}, lm::DType::F32);
    c.fused_attention({&q, &k, &v, 0.25f, std::nullopt}, out);
    return out.to_f32();
  };
  step(cache, 37, seed);
  step(cache, 1, seed + 3);
  A2atsCache restored(A2atsParams{});
  restored.from_state(cache.state(), cache.meta_state());
  EXPECT_EQ(restored.nbytes() > 0, true);
  EXPECT_EQ(restored.far_rows(), cache.far_rows());
  const auto copy = cache.clone();
  for (uint64_t i = 0; i < 4; ++i) {
    const int64_t s = i == 0 ? 9 : 1;
    const std::vector<float> a = step(cache, s, 200 + 3 * i);
    EXPECT_EQ(a, step(restored, s, 200 + 3 * i)) << "step " << i;
    EXPECT_EQ(a, step(*copy, s, 200 + 3 * i)) << "step " << i;
  }
  EXPECT_EQ(restored.offset(), cache.offset());
  // A corrupt save names the problem.
  std::vector<std::string> meta = cache.meta_state();
  meta[8] = "999";
  EXPECT_THROW(restored.from_state(cache.state(), meta), base::FormatError);
}

TEST(A2ats, BadOptionsNameTheField) {
  const auto names = [](const std::function<void(A2atsOptions&)>& change, const std::string& field) {
    const std::string m = test_support::option_error<A2atsOptions>("a2ats", change, 64);
    EXPECT_NE(m.find(field), std::string::npos) << m;
  };
  names([](A2atsOptions& o) { o.a2ats_codebook_bits = 9; }, "a2ats_codebook_bits");
  names([](A2atsOptions& o) { o.a2ats_codebook_bits = 0; }, "a2ats_codebook_bits");
  names([](A2atsOptions& o) { o.a2ats_sub_dim = 7; }, "a2ats_sub_dim");  // does not divide 64
  names([](A2atsOptions& o) { o.a2ats_window = 0; }, "a2ats_window");
  names([](A2atsOptions& o) { o.a2ats_b = -1; }, "a2ats_b");
  names([](A2atsOptions& o) { o.a2ats_beta = 1.5; }, "a2ats_beta");
  names([](A2atsOptions& o) { o.a2ats_retrieval_fraction = 0.0; }, "a2ats_retrieval_fraction");
  names([](A2atsOptions& o) { o.a2ats_retrieval_fraction = 1.01; }, "a2ats_retrieval_fraction");
  names([](A2atsOptions& o) { o.a2ats_rope_base = -1.0; }, "a2ats_rope_base");
  names([](A2atsOptions& o) { o.a2ats_query_h = "h.npy"; }, "a2ats_query_h");
  names([](A2atsOptions& o) { o.a2ats_codebook = "book.npy"; }, "a2ats_codebook");
  names([](A2atsOptions& o) { o.a2ats_rope_scaling = "linear"; }, "a2ats_rope_scaling");
  EXPECT_EQ(test_support::option_error<A2atsOptions>(
                "a2ats", [](A2atsOptions&) {}, 64),
            "accepted");
}

}  // namespace
}  // namespace veloxquant
