// The shared attention driver against brute-force attention written out here (double precision,
// every row tested for visibility by its position): GQA groups 1/3/8, decode with split-K over
// 1..8+ ranges, prefill tiles, ragged row counts, windows, several segments, explicit positions,
// and the row weights eviction policies read.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "lm/tensor.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/dtype_rows.h"

namespace veloxquant::attention {
namespace {

struct Problem {
  int64_t batch = 1, q_heads = 3, kv_heads = 1, n = 1, d = 64, dv = 64;
  int64_t first_position = 0;
  std::optional<int64_t> window;
};

std::vector<float> random_values(std::size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Brute force: out[b, head, i] = softmax over visible rows of (q . k * scale) weighted values;
// rows given per (b, h) as f32 keys/values with positions.
struct Rows {
  std::vector<float> keys, values;  // [B, H, T, D] / [B, H, T, Dv]
  std::vector<int32_t> positions;   // [B, H, T]
  int64_t t = 0;
};

// The softmax weights of one query row (batch b, kv head h, position qpos) over every row of the
// segments it sees, and where each came from (segment, row).
struct VisibleWeights {
  std::vector<double> w;
  std::vector<std::pair<std::size_t, int64_t>> at;
};

VisibleWeights visible_weights(const Problem& p, const float* qq, int64_t b, int64_t h, int64_t qpos,
                               const std::vector<const Rows*>& segments, float scale) {
  VisibleWeights v;
  for (std::size_t si = 0; si < segments.size(); ++si) {
    const Rows& r = *segments[si];
    for (int64_t j = 0; j < r.t; ++j) {
      const int64_t pos = r.positions[static_cast<std::size_t>((b * p.kv_heads + h) * r.t + j)];
      if (pos > qpos || (p.window && qpos - pos >= *p.window)) continue;
      double dot = 0.0;
      for (int64_t e = 0; e < p.d; ++e)
        dot += double(qq[e]) * r.keys[static_cast<std::size_t>(((b * p.kv_heads + h) * r.t + j) * p.d + e)];
      v.w.push_back(dot * scale);
      v.at.emplace_back(si, j);
    }
  }
  if (v.w.empty()) return v;
  double big = -1e300, total = 0.0;
  for (double x : v.w) big = std::max(big, x);
  for (double& x : v.w) total += (x = std::exp(x - big));
  for (double& x : v.w) x /= total;
  return v;
}

std::vector<float> brute_force(const Problem& p, const std::vector<float>& q, const std::vector<const Rows*>& segments,
                               float scale, std::vector<std::vector<float>>* weights = nullptr) {
  const int64_t group = p.q_heads / p.kv_heads;
  std::vector<float> out(static_cast<std::size_t>(p.batch * p.q_heads * p.n * p.dv), 0.0f);
  if (weights) {
    weights->clear();
    for (const Rows* r : segments) weights->emplace_back(static_cast<std::size_t>(p.batch * p.kv_heads * r->t), 0.0f);
  }
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t head = 0; head < p.q_heads; ++head) {
      const int64_t h = head / group;
      for (int64_t i = 0; i < p.n; ++i) {
        const float* qq = q.data() + ((b * p.q_heads + head) * p.n + i) * p.d;
        const VisibleWeights v = visible_weights(p, qq, b, h, p.first_position + i, segments, scale);
        float* o = out.data() + ((b * p.q_heads + head) * p.n + i) * p.dv;
        for (std::size_t k = 0; k < v.w.size(); ++k) {
          const Rows& r = *segments[v.at[k].first];
          const auto row = static_cast<std::size_t>((b * p.kv_heads + h) * r.t + v.at[k].second);
          for (int64_t e = 0; e < p.dv; ++e)
            o[e] += static_cast<float>(v.w[k] * r.values[row * static_cast<std::size_t>(p.dv) + e]);
          if (weights) (*weights)[v.at[k].first][row] += static_cast<float>(v.w[k] / group);
        }
      }
    }
  }
  return out;
}

Rows make_rows(const Problem& p, int64_t t, int64_t first_pos, uint32_t seed, int64_t stride = 1) {
  Rows r;
  r.t = t;
  r.keys = random_values(static_cast<std::size_t>(p.batch * p.kv_heads * t * p.d), seed);
  r.values = random_values(static_cast<std::size_t>(p.batch * p.kv_heads * t * p.dv), seed + 1);
  for (int64_t bh = 0; bh < p.batch * p.kv_heads; ++bh) {
    for (int64_t j = 0; j < t; ++j) r.positions.push_back(static_cast<int32_t>(first_pos + j * stride));
  }
  return r;
}

struct TensorRows {
  lm::Tensor keys, values;
};

TensorRows tensors_of(const Problem& p, const Rows& r, lm::DType dtype) {
  return {lm::Tensor::from_f32(r.keys, {p.batch, p.kv_heads, r.t, p.d}, dtype),
          lm::Tensor::from_f32(r.values, {p.batch, p.kv_heads, r.t, p.dv}, dtype)};
}

// Rows as the driver's dtype source sees them after rounding to `dtype`.
Rows rounded(const Rows& r, const TensorRows& t) {
  Rows out = r;
  out.keys = t.keys.to_f32();
  out.values = t.values.to_f32();
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tol) {
  ASSERT_EQ(got.size(), want.size());
  float worst = 0.0f;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  EXPECT_LT(worst, tol);
}

std::vector<float> run_driver(const Problem& p, const std::vector<float>& q, const std::vector<const RowSource*>& srcs,
                              float scale, base::ThreadPool* pool, std::vector<std::vector<float>>* weights = nullptr,
                              const std::vector<int64_t>& seg_rows = {}, int64_t max_logged_scores = -1,
                              int64_t weights_from_segment = 0) {
  std::vector<float> out(static_cast<std::size_t>(p.batch * p.q_heads * p.n * p.dv), -7.0f);
  AttentionCall call;
  call.queries = q.data();
  call.batch = p.batch;
  call.q_heads = p.q_heads;
  call.kv_heads = p.kv_heads;
  call.n_queries = p.n;
  call.first_position = p.first_position;
  call.window = p.window;
  call.scale = scale;
  call.out = out.data();
  if (max_logged_scores >= 0) call.max_logged_scores = max_logged_scores;
  if (weights) {
    weights->clear();
    for (std::size_t s = 0; s < srcs.size(); ++s) {
      weights->emplace_back(static_cast<std::size_t>(p.batch * p.kv_heads * seg_rows[s]), -1.0f);
      if (static_cast<int64_t>(s) < weights_from_segment) continue;
      call.row_weights[s] = (*weights)[s].data();
      call.row_weight_stride[s] = seg_rows[s];
    }
  }
  attend(call, srcs.data(), static_cast<int>(srcs.size()), pool);
  return out;
}

struct Case {
  int64_t group, kv_heads, n, t;
  std::optional<int64_t> window;
};

class DriverSingleSegment : public ::testing::TestWithParam<Case> {};

TEST_P(DriverSingleSegment, MatchesBruteForce) {
  const Case c = GetParam();
  Problem p;
  p.kv_heads = c.kv_heads;
  p.q_heads = c.group * c.kv_heads;
  p.batch = 2;
  p.n = c.n;
  p.window = c.window;
  p.first_position = c.t - c.n;  // the call's queries are the last n of t positions
  const Rows rows = make_rows(p, c.t, 0, 11);
  const std::vector<float> q = random_values(static_cast<std::size_t>(p.batch * p.q_heads * p.n * p.d), 3);
  const float scale = 1.0f / 8.0f;
  base::ThreadPool pool(3);
  for (lm::DType dtype : {lm::DType::F32, lm::DType::F16}) {
    const TensorRows t = tensors_of(p, rows, dtype);
    const Rows exact = rounded(rows, t);
    const DtypeRowSource src(t.keys, t.values, c.t);
    const std::vector<float> want = brute_force(p, q, {&exact}, scale);
    expect_close(run_driver(p, q, {&src}, scale, &pool), want, 2e-5f);
    expect_close(run_driver(p, q, {&src}, scale, nullptr), want, 2e-5f);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, DriverSingleSegment,
                         ::testing::Values(Case{1, 1, 1, 1, {}}, Case{3, 1, 1, 63, {}}, Case{3, 3, 1, 64, {}},
                                           Case{3, 1, 1, 65, {}}, Case{8, 1, 1, 700, {}},
                                           // split-K: 256 rows per range -> 2, 3, ..., 8 ranges and a ragged last one
                                           Case{3, 1, 1, 512, {}}, Case{3, 1, 1, 769, {}}, Case{1, 2, 1, 2048, {}},
                                           Case{3, 1, 1, 2000, {}}, Case{3, 3, 1, 1500, 100}, Case{8, 1, 2, 900, 33},
                                           // prefill: several query blocks, causal, tiles crossing the diagonal
                                           Case{3, 1, 37, 37, {}}, Case{3, 3, 40, 300, {}}, Case{1, 1, 70, 200, 50},
                                           Case{8, 1, 17, 17, 5}));

TEST(AttentionDriver, SegmentsAttendAsOneSequence) {
  // A quantized-store + tail split, as KIVI has: rows 0..199 in one source, 200..236 in another.
  Problem p;
  p.kv_heads = 3;
  p.q_heads = 9;
  for (int64_t n : {1, 12, 37}) {
    p.n = n;
    p.first_position = 237 - n;
    const Rows a = make_rows(p, 200, 0, 5), b = make_rows(p, 37, 200, 6);
    const TensorRows ta = tensors_of(p, a, lm::DType::F32), tb = tensors_of(p, b, lm::DType::F32);
    const DtypeRowSource sa(ta.keys, ta.values, 200, 0), sb(tb.keys, tb.values, 37, 200);
    const std::vector<float> q = random_values(static_cast<std::size_t>(p.q_heads * p.n * p.d), 9);
    base::ThreadPool pool(2);
    const std::vector<float> want = brute_force(p, q, {&a, &b}, 0.125f);
    expect_close(run_driver(p, q, {&sa, &sb}, 0.125f, &pool), want, 2e-5f);
  }
}

TEST(AttentionDriver, ValueRowOffsetIsTheSliceWithoutSlicing) {
  // svdq/xkv: tail keys in their own tensor, the same rows' values from row `frontier` of the
  // whole value store. The offset view must attend exactly as the sliced tensor does.
  Problem p;
  p.kv_heads = 3;
  p.q_heads = 9;
  p.n = 1;
  p.first_position = 236;
  const Rows all = make_rows(p, 237, 0, 5);
  const TensorRows t = tensors_of(p, all, lm::DType::F16);
  const lm::Tensor tail_keys = t.keys.slice(2, 200, 237);
  const DtypeRowSource offset(tail_keys, t.values, 200, 37, 200);
  const DtypeRowSource sliced(tail_keys, t.values.slice(2, 200, 237), 37, 200);
  const std::vector<float> q = random_values(static_cast<std::size_t>(p.q_heads * p.n * p.d), 9);
  EXPECT_EQ(run_driver(p, q, {&offset}, 0.125f, nullptr), run_driver(p, q, {&sliced}, 0.125f, nullptr));
  EXPECT_THROW(DtypeRowSource(tail_keys, t.values, 201, 37, 200), std::invalid_argument);  // past the values
  EXPECT_THROW(DtypeRowSource(tail_keys, t.values, -1, 37, 200), std::invalid_argument);
  EXPECT_THROW(DtypeRowSource(tail_keys, t.values, 0, 38, 200), std::invalid_argument);  // more than the keys
}

TEST(AttentionDriver, ExplicitPositionsAndRowWeights) {
  // Kept rows of an eviction cache: positions 0, 3, 6, ... (non-contiguous), then the call's
  // own new rows; the row weights are what an H2O-style policy accumulates.
  Problem p;
  p.kv_heads = 2;
  p.q_heads = 6;
  p.window = 400;
  for (int64_t n : {1, 5}) {
    p.n = n;
    const int64_t kept = 300;
    const Rows a = make_rows(p, kept, 0, 21, 3);
    const int64_t first_new = 3 * kept;
    const Rows b = make_rows(p, n, first_new, 22);
    p.first_position = first_new;
    const TensorRows ta = tensors_of(p, a, lm::DType::F32), tb = tensors_of(p, b, lm::DType::F32);
    DtypeRowSource sa(ta.keys, ta.values, kept);
    sa.set_positions(a.positions.data(), kept, p.kv_heads * kept);
    const DtypeRowSource sb(tb.keys, tb.values, n, first_new);
    const std::vector<float> q = random_values(static_cast<std::size_t>(p.q_heads * p.n * p.d), 23);
    std::vector<std::vector<float>> want_w, got_w;
    const std::vector<float> want = brute_force(p, q, {&a, &b}, 0.125f, &want_w);
    base::ThreadPool pool(2);
    // Weights from the main pass's logged scores (default), and from a second scoring pass
    // (a limit of 0 logged scores).
    for (int64_t limit : {int64_t{-1}, int64_t{0}}) {
      expect_close(run_driver(p, q, {&sa, &sb}, 0.125f, &pool, &got_w, {kept, n}, limit), want, 2e-5f);
      for (std::size_t s = 0; s < 2; ++s) expect_close(got_w[s], want_w[s], 1e-5f);
      // Weights of each query sum to 1 over the rows it saw, averaged over the group: n per head.
      double total = 0.0;
      for (const auto& w : got_w)
        for (float x : w) total += x;
      EXPECT_NEAR(total, static_cast<double>(n * p.kv_heads), 1e-3);
      // Weights asked of the second segment only: the first's buffer stays untouched.
      run_driver(p, q, {&sa, &sb}, 0.125f, &pool, &got_w, {kept, n}, limit, 1);
      for (float x : got_w[0]) EXPECT_EQ(x, -1.0f);
      expect_close(got_w[1], want_w[1], 1e-5f);
    }
  }
}

TEST(AttentionDriver, ReferenceAgreesAndRowsNobodySeesGiveZero) {
  Problem p;
  p.n = 2;
  p.first_position = 0;
  const Rows a = make_rows(p, 10, 5, 31);  // positions 5..14: query positions 0, 1 see nothing
  const TensorRows ta = tensors_of(p, a, lm::DType::F32);
  const DtypeRowSource src(ta.keys, ta.values, 10, 5);
  const std::vector<float> q = random_values(static_cast<std::size_t>(p.q_heads * p.n * p.d), 1);
  const std::vector<float> got = run_driver(p, q, {&src}, 0.125f, nullptr);
  for (float x : got) EXPECT_EQ(x, 0.0f);
  p.first_position = 12;
  const RowSource* one = &src;
  std::vector<float> ref(got.size());
  AttentionCall call;
  call.queries = q.data();
  call.batch = 1;
  call.q_heads = 3;
  call.kv_heads = 1;
  call.n_queries = 2;
  call.first_position = 12;
  call.scale = 0.125f;
  call.out = ref.data();
  attend_reference(call, &one, 1);
  expect_close(ref, brute_force(p, q, {&a}, 0.125f), 2e-5f);
}

TEST(AttentionDriver, RefusesBadGeometry) {
  Problem p;
  const Rows a = make_rows(p, 4, 0, 1);
  const TensorRows ta = tensors_of(p, a, lm::DType::F32);
  const DtypeRowSource src(ta.keys, ta.values, 4);
  std::vector<float> q(std::size_t{64} * 4), out(std::size_t{64} * 4);
  AttentionCall call;
  call.queries = q.data();
  call.out = out.data();
  call.batch = 1;
  call.q_heads = 4;
  call.kv_heads = 3;  // 4 query heads cannot share 3 kv heads
  call.n_queries = 1;
  EXPECT_THROW(attend(call, src, nullptr), std::invalid_argument);
  call.kv_heads = 1;
  call.window = 0;
  EXPECT_THROW(attend(call, src, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace veloxquant::attention
