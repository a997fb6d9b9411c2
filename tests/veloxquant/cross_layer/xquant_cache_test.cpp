// XQuantCache (spec §4.3): the anchor alone against the group quantizer, a reuse layer against
// the anchor's codes with its own params and residual, byte-exact nbytes with the codes counted
// once, for_model wiring (one coordinator per call), max_ctx, validation and a loaded list
// rejoining its coordinator.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "base/error.h"
#include "lm/cache/prompt_cache_file.h"
#include "support/fake_model.h"
#include "support/fused_vs_fetched.h"
#include "support/kv_test_data.h"
#include "support/reference_attention.h"
#include "veloxquant/cross_layer/xquant_cache.h"
#include "veloxquant/cross_layer/token_group_quant.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

using cross_layer::TokenGroupParams;

// Rows [0, rows) of head h of a [1, H, S, D] f32 vector.
std::vector<float> head_rows(const std::vector<float>& all, int64_t h, int64_t s, int64_t d, int64_t rows) {
  return {all.begin() + h * s * d, all.begin() + h * s * d + rows * d};
}

// What the anchor stores for x [rows, d]: codes and the group quantizer's reconstruction.
std::vector<float> anchor_reconstruction(const std::vector<float>& x, int64_t rows, int64_t d, int group, int bits,
                                         std::vector<uint8_t>* codes_out = nullptr) {
  std::vector<uint8_t> codes(x.size());
  std::vector<TokenGroupParams> params(static_cast<std::size_t>(cross_layer::token_group_count(rows, group) * d));
  cross_layer::quantize_token_groups(x.data(), rows, d, group, bits, codes.data(), params.data());
  std::vector<float> out(x.size());
  cross_layer::dequantize_token_groups(codes.data(), rows, d, group, params.data(), out.data());
  if (codes_out) *codes_out = codes;
  return out;
}

// A reuse layer's reconstruction: the anchor's codes, own params, plus the quantized residual.
std::vector<float> reuse_reconstruction(const std::vector<float>& x, const std::vector<uint8_t>& anchor_codes,
                                        int64_t rows, int64_t d, int group, int bits, int residual_bits) {
  std::vector<TokenGroupParams> params(static_cast<std::size_t>(cross_layer::token_group_count(rows, group) * d));
  cross_layer::fit_token_group_params(x.data(), rows, d, group, bits, params.data());
  std::vector<float> out(x.size());
  cross_layer::dequantize_token_groups(anchor_codes.data(), rows, d, group, params.data(), out.data());
  if (residual_bits == 0) return out;
  std::vector<float> residual(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) residual[i] = x[i] - out[i];
  const std::vector<float> residual_hat = anchor_reconstruction(residual, rows, d, group, residual_bits);
  for (std::size_t i = 0; i < x.size(); ++i) out[i] += residual_hat[i];
  return out;
}

TEST(XQuantCache, AnchorAloneIsTheGroupQuantizerPlusAnExactTail) {
  constexpr int64_t H = 2, D = 32;
  XQuantCache cache(2, 4, 32);  // alone: an anchor, no residual
  const lm::Tensor k1 = test_support::random_kv(1, H, 50, D, 1, lm::DType::F32);
  const lm::Tensor k2 = test_support::random_kv(1, H, 20, D, 2, lm::DType::F32);
  cache.update_and_fetch(k1, k1);
  const lm::KeysValues got = cache.update_and_fetch(k2, k2);
  EXPECT_EQ(cache.frontier(), 64);
  const std::vector<float> fed = test_support::concat_tokens_f32({k1, k2});
  const std::vector<float> keys = got.keys.to_f32();
  for (int64_t h = 0; h < H; ++h) {
    const std::vector<float> want = anchor_reconstruction(head_rows(fed, h, 70, D, 64), 64, D, 32, 2);
    EXPECT_EQ(head_rows(keys, h, 70, D, 64), want) << "head " << h;
    for (int64_t i = 64 * D; i < 70 * D; ++i) EXPECT_EQ(keys[h * 70 * D + i], fed[h * 70 * D + i]);
  }
  // codes 64 rows x 2 heads x packed_words(32, 2) = 2 words x 4 B x (K, V)     =  2048
  // params 2 groups x 2 heads x (scale, min) x 32 channels x 4 B x (K, V)     =  2048
  // tail [1, 2, 32, 32] f32 x (K, V)                                          = 16384
  EXPECT_EQ(cache.nbytes(), 2048u + 2048u + 16384u);
}

TEST(XQuantCache, ReuseLayerReadsTheAnchorsCodesAndStoresOnlyItsOwnParamsAndResidual) {
  constexpr int64_t H = 2, D = 16, S = 40;
  constexpr int G = 8;
  auto coordinator = std::make_shared<XQuantCoordinator>(8192, "xquant_max_ctx");
  XQuantCache anchor(2, 4, G, {true, 0, 1}, coordinator);
  XQuantCache reuse(2, 4, G, {false, 0, 0}, coordinator);
  const lm::Tensor a = test_support::random_kv(1, H, S, D, 11, lm::DType::F32);
  const lm::Tensor r = test_support::random_kv(1, H, S, D, 12, lm::DType::F32);
  anchor.update_and_fetch(a, a);
  EXPECT_EQ(coordinator->live_segments(), 1u);
  EXPECT_EQ(coordinator->live_tokens(0), S);
  const std::vector<float> got = reuse.update_and_fetch(r, r).keys.to_f32();
  EXPECT_EQ(coordinator->live_segments(), 0u);  // its only reader read it: reclaimed
  EXPECT_EQ(coordinator->live_tokens(0), 0);
  EXPECT_EQ(reuse.reused_rows(), S);
  const std::vector<float> av = a.to_f32(), rv = r.to_f32();
  for (int64_t h = 0; h < H; ++h) {
    std::vector<uint8_t> codes;
    anchor_reconstruction(head_rows(av, h, S, D, S), S, D, G, 2, &codes);
    EXPECT_EQ(head_rows(got, h, S, D, S), reuse_reconstruction(head_rows(rv, h, S, D, S), codes, S, D, G, 2, 4));
  }
  // anchor: codes 40 x 2 heads x 1 word x 4 B x 2 = 640; params 5 groups x 2 x 2 x 16 x 4 B x 2 = 2560;
  //         tail [1, 2, 8, 16] f32 x 2 = 2048.
  EXPECT_EQ(anchor.nbytes(), 640u + 2560u + 2048u);
  // reuse: no codes of its own; params 2560; residual codes 40 x 2 x 2 words x 4 B x 2 = 1280;
  //        residual params 2560; tail 2048.
  EXPECT_EQ(reuse.nbytes(), 2560u + 1280u + 2560u + 2048u);
}

TEST(XQuantCache, PureReuseWithoutResidualIsCoarser) {
  constexpr int64_t H = 1, D = 16, S = 64;
  auto coordinator = std::make_shared<XQuantCoordinator>(8192, "xquant_max_ctx");
  XQuantCache anchor(2, 0, 32, {true, 0, 2}, coordinator);
  XQuantCache pure(2, 0, 32, {false, 0, 0}, coordinator);
  XQuantCache with_residual(2, 4, 32, {false, 0, 0}, coordinator);
  const lm::Tensor a = test_support::random_kv(1, H, S, D, 21, lm::DType::F32);
  const lm::Tensor r = test_support::random_kv(1, H, S, D, 22, lm::DType::F32);
  anchor.update_and_fetch(a, a);
  const auto error = [&](XQuantCache& c) {
    const std::vector<float> got = c.update_and_fetch(r, r).keys.to_f32(), want = r.to_f32();
    double e = 0;
    for (std::size_t i = 0; i < got.size(); ++i) e += (got[i] - want[i]) * (got[i] - want[i]);
    return e / static_cast<double>(got.size());
  };
  const double pure_mse = error(pure), residual_mse = error(with_residual);
  EXPECT_EQ(coordinator->live_segments(), 0u);  // two readers, both read
  // Unrelated data: the anchor's codes carry nothing, so pure reuse errs by about the data's
  // own spread (uniform [-4, 4): variance 5.3). The residual spans at most twice the data's
  // range (16), so its 4-bit step is <= 16/15 and the rounding error <= step^2 / 12 = 0.095.
  EXPECT_GT(pure_mse, 2.0);
  EXPECT_LT(residual_mse, 0.095);
}

TEST(XQuantCache, TrimIntoQuantizedGroupsKeepsEarlierRowsAndTheSharing) {
  constexpr int64_t H = 1, D = 8;
  constexpr int G = 8;
  auto coordinator = std::make_shared<XQuantCoordinator>(8192, "xquant_max_ctx");
  XQuantCache anchor(2, 4, G, {true, 0, 1}, coordinator);
  XQuantCache reuse(2, 4, G, {false, 0, 0}, coordinator);
  const lm::Tensor a = test_support::random_kv(1, H, 40, D, 31, lm::DType::F32);
  const lm::Tensor r = test_support::random_kv(1, H, 40, D, 32, lm::DType::F32);
  const std::vector<float> before_a = anchor.update_and_fetch(a, a).keys.to_f32();
  const std::vector<float> before_r = reuse.update_and_fetch(r, r).keys.to_f32();
  const std::size_t bytes = anchor.nbytes();
  // 40 -> 27 tokens: frontier 40 -> 24; rows 24..26 go back to the tail, decoded from codes.
  EXPECT_EQ(anchor.trim(13), 13);
  EXPECT_EQ(reuse.trim(13), 13);
  EXPECT_EQ(anchor.offset(), 27);
  EXPECT_EQ(anchor.frontier(), 24);
  EXPECT_EQ(anchor.nbytes(), bytes);  // the cut block keeps its buffers until it is dropped
  const lm::Tensor x = test_support::random_kv(1, H, 1, D, 33, lm::DType::F32);
  const std::vector<float> after_a = anchor.update_and_fetch(x, x).keys.to_f32();
  const std::vector<float> after_r = reuse.update_and_fetch(x, x).keys.to_f32();
  ASSERT_EQ(after_a.size(), 28u * D);
  EXPECT_EQ(std::vector<float>(after_a.begin(), after_a.begin() + 27 * D),
            std::vector<float>(before_a.begin(), before_a.begin() + 27 * D));
  EXPECT_EQ(std::vector<float>(after_r.begin(), after_r.begin() + 27 * D),
            std::vector<float>(before_r.begin(), before_r.begin() + 27 * D));
  EXPECT_EQ(std::vector<float>(after_a.begin() + 27 * D, after_a.end()), x.to_f32());
  // Completing group 24..31 again: the anchor publishes it, the reuse layer reads it.
  const lm::Tensor y = test_support::random_kv(1, H, 4, D, 34, lm::DType::F32);
  anchor.update_and_fetch(y, y);
  reuse.update_and_fetch(y, y);
  EXPECT_EQ(reuse.frontier(), 32);
  EXPECT_EQ(reuse.reused_rows(), 32);
  EXPECT_EQ(coordinator->live_segments(), 0u);
  EXPECT_EQ(anchor.trim(1000), 32);
  EXPECT_EQ(anchor.offset(), 0);
  EXPECT_EQ(anchor.frontier(), 0);
}

TEST(XQuantCache, StateThatDoesNotFitIsAFormatError) {
  XQuantCache cache(2, 4, 8);
  const lm::Tensor kv = test_support::random_kv(1, 2, 20, 8, 41, lm::DType::F16);
  cache.update_and_fetch(kv, kv);
  std::vector<lm::Tensor> state = cache.state();
  const std::vector<std::string> meta = cache.meta_state();  // offset 20, frontier 16
  ASSERT_EQ(state.size(), 10u);
  XQuantCache good(2, 0, 32);
  good.from_state(state, meta);
  EXPECT_EQ(good.update_and_fetch(kv, kv).keys.to_f32(), cache.update_and_fetch(kv, kv).keys.to_f32());
  XQuantCache bad(2, 0, 32);
  std::vector<std::string> odd = meta;
  odd[5] = "12";  // a frontier that is no multiple of the group
  EXPECT_THROW(bad.from_state(state, odd), base::FormatError);
  state[2] = lm::Tensor({1, 2, 3, 16}, lm::DType::F32);  // 3 key-param groups for a frontier of 16 rows
  EXPECT_THROW(bad.from_state(state, meta), base::FormatError);
}

KVCacheConfig xquant_config() {
  KVCacheConfig c;
  c.method = "xquant";
  c.xquant.xquant_group_quant_size = 4;
  return c;
}

TEST(XQuantCache, ForModelWiresOneCoordinatorPerCall) {
  test_support::FakeModel model;
  const lm::CacheList first = KVCacheBuilder::for_model(model, xquant_config());
  const lm::CacheList second = KVCacheBuilder::for_model(model, xquant_config());
  ASSERT_EQ(first.size(), 2u);
  auto anchor = std::dynamic_pointer_cast<XQuantCache>(first[0]);
  auto reuse = std::dynamic_pointer_cast<XQuantCache>(first[1]);
  auto other_reuse = std::dynamic_pointer_cast<XQuantCache>(second[1]);
  ASSERT_TRUE(anchor && reuse && other_reuse);
  EXPECT_TRUE(anchor->is_anchor());
  EXPECT_EQ(anchor->role().n_readers, 1);
  EXPECT_FALSE(reuse->is_anchor());
  const lm::Tensor kv = test_support::random_kv(1, 1, 8, 4, 5, lm::DType::F32);
  anchor->update_and_fetch(kv, kv);
  other_reuse->update_and_fetch(kv, kv);  // another call's list: another coordinator
  EXPECT_EQ(other_reuse->reused_rows(), 0);
  reuse->update_and_fetch(kv, kv);
  EXPECT_EQ(reuse->reused_rows(), 8);
}

TEST(XQuantCache, MaxCtxNamesTheOptionToRaise) {
  test_support::FakeModel model;
  KVCacheConfig c = xquant_config();
  c.xquant.xquant_max_ctx = 8;
  const lm::CacheList caches = KVCacheBuilder::for_model(model, c);
  const lm::Tensor kv = test_support::random_kv(1, 1, 12, 4, 6, lm::DType::F32);
  try {
    caches[0]->update_and_fetch(kv, kv);
    FAIL() << "12 live tokens > xquant_max_ctx 8";
  } catch (const cross_layer::CrossLayerCapacityError& e) {
    EXPECT_NE(std::string(e.what()).find("Increase xquant_max_ctx"), std::string::npos) << e.what();
  }
}

TEST(XQuantCache, ValidationAsTheOriginal) {
  const auto build = [](auto edit) {
    KVCacheConfig c;
    c.method = "xquant";
    c.head_dim = 32;
    edit(c);
    return KVCacheBuilder(c).build();
  };
  const auto expect_error_naming = [&](auto edit, const std::string& field) {
    try {
      build(edit);
      FAIL() << field;
    } catch (const QuantizerConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  expect_error_naming([](KVCacheConfig& c) { c.xquant.xquant_group_size = 1; }, "xquant_group_size");
  expect_error_naming([](KVCacheConfig& c) { c.xquant.xquant_base_bits = 9; }, "xquant_base_bits");
  expect_error_naming([](KVCacheConfig& c) { c.xquant.xquant_base_bits = 0; }, "xquant_base_bits");
  expect_error_naming([](KVCacheConfig& c) { c.xquant.xquant_residual_bits = -1; }, "xquant_residual_bits");
  expect_error_naming([](KVCacheConfig& c) { c.xquant.xquant_group_quant_size = 0; }, "xquant_group_quant_size");
  expect_error_naming([](KVCacheConfig& c) { c.xquant.xquant_max_ctx = 0; }, "xquant_max_ctx");
  EXPECT_NO_THROW(build([](KVCacheConfig& c) { c.xquant.xquant_group_size = 2; }));
}

TEST(XQuantCache, LoadedListRejoinsOneCoordinatorAndKeepsReusing) {
  test_support::FakeModel model;
  const lm::CacheList caches = KVCacheBuilder::for_model(model, xquant_config());
  const lm::Tensor a = test_support::random_kv(1, 1, 10, 4, 7, lm::DType::F32);
  for (const auto& c : caches) c->update_and_fetch(a, a);
  integration::register_prompt_cache_types();
  const auto load = [&] {
    lm::CacheList loaded;
    for (const auto& c : caches) {
      auto fresh = lm::make_cache_of_type(c->type_name());
      fresh->from_state(c->state(), c->meta_state());
      loaded.push_back(fresh);
    }
    return loaded;
  };
  // Two loaded copies of the same list: each gets a coordinator of its own.
  const std::vector<lm::CacheList> lists = {caches, load(), load()};
  for (std::size_t i = 1; i < 3; ++i) {
    auto reuse = std::dynamic_pointer_cast<XQuantCache>(lists[i][1]);
    ASSERT_TRUE(reuse);
    EXPECT_FALSE(reuse->is_anchor());
    EXPECT_EQ(reuse->reused_rows(), 0);  // restored codes are its own copy
  }
  // Layer by layer, the three lists interleaved: same rows everywhere, and the tokens
  // completed after the load go through each list's own coordinator.
  const lm::Tensor b = test_support::random_kv(1, 1, 6, 4, 8, lm::DType::F32);
  for (std::size_t l = 0; l < 2; ++l) {
    const lm::KeysValues live = lists[0][l]->update_and_fetch(b, b);
    for (std::size_t i = 1; i < 3; ++i) {
      const lm::KeysValues back = lists[i][l]->update_and_fetch(b, b);
      EXPECT_EQ(live.keys.to_f32(), back.keys.to_f32()) << "layer " << l << " copy " << i;
      EXPECT_EQ(live.values.to_f32(), back.values.to_f32()) << "layer " << l << " copy " << i;
    }
  }
  for (std::size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(std::dynamic_pointer_cast<XQuantCache>(lists[i][1])->reused_rows(), 8) << "copy " << i;  // rows 8..15
  }
}

}  // namespace
}  // namespace veloxquant

namespace veloxquant {
namespace {

// The largest |fused - reference| of each chunk for a reuse layer with a residual: two reuse
// layers, each reading its own anchor's segment, the anchors fed the same rows (so the same
// codes); one attends through fused_attention, the other's fetched rows go to the reference.
std::vector<float> reuse_fused_vs_fetched(int base_bits, int residual_bits, int group,
                                          const std::vector<int64_t>& chunks, int64_t* reused_rows) {
  const int64_t heads = 2, hq = 6, d = 64;
  auto c1 = std::make_shared<XQuantCoordinator>(8192, "xquant_max_ctx");
  auto c2 = std::make_shared<XQuantCoordinator>(8192, "xquant_max_ctx");
  XQuantCache anchor1(base_bits, residual_bits, group, {true, 0, 1}, c1);
  XQuantCache anchor2(base_bits, residual_bits, group, {true, 0, 1}, c2);
  XQuantCache fused(base_bits, residual_bits, group, {false, 0, 0}, c1);
  XQuantCache plain(base_bits, residual_bits, group, {false, 0, 0}, c2);
  uint64_t seed = 700;
  int64_t first = 0;
  std::vector<float> worst_per_chunk;
  for (const int64_t n : chunks) {
    const lm::Tensor ka = test_support::random_kv(1, heads, n, d, seed++, lm::DType::F32);
    anchor1.update_and_fetch(ka, ka);
    anchor2.update_and_fetch(ka, ka);
    const lm::Tensor k = test_support::random_kv(1, heads, n, d, seed++, lm::DType::F32);
    const lm::Tensor v = test_support::random_kv(1, heads, n, d, seed++, lm::DType::F32);
    const lm::Tensor q = test_support::random_kv(1, hq, n, d, seed++, lm::DType::F32);
    lm::Tensor out({1, hq, n, d}, lm::DType::F32);
    fused.fused_attention({&q, &k, &v, 0.125f, std::nullopt}, out);
    const std::vector<float> want =
        test_support::reference_attention(plain.update_and_fetch(k, v), q.to_f32(), hq, n, first, 0.125f);
    const std::vector<float> got = out.to_f32();
    float worst = 0;
    for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
    worst_per_chunk.push_back(worst);
    first += n;
  }
  EXPECT_EQ(fused.reused_rows(), plain.reused_rows());
  *reused_rows = fused.reused_rows();
  return worst_per_chunk;
}

// The fused path (xquant_rows.h: keys scored and values accumulated from the codes) against the
// plain reference attention over the rows update_and_fetch returns, chunk by chunk (a prefill,
// decode steps, a chunk that completes token groups mid-call). The rows are f32, so the fetched
// rows are not rounded: with f32 folded queries only float summation order differs.
TEST(XQuantCache, FusedAttentionEqualsAttentionOverFetchedRows) {
  const int64_t heads = 2, hq = 6, d = 64;
  const std::vector<int64_t> chunks{70, 1, 1, 40, 1, 33};
  {  // an anchor alone (no coordinator)
    XQuantCache fused(2, 4, 32), plain(2, 4, 32);
    const std::vector<float> worst = test_support::fused_vs_fetched(fused, plain, heads, hq, d, chunks, 500);
    for (std::size_t c = 0; c < chunks.size(); ++c) EXPECT_LE(worst[c], 2e-5f) << "anchor, chunk " << chunks[c];
  }
  int64_t reused = 0;
  const std::vector<float> worst = reuse_fused_vs_fetched(2, 4, 16, chunks, &reused);
  for (std::size_t c = 0; c < chunks.size(); ++c) EXPECT_LE(worst[c], 2e-5f) << "reuse, chunk " << chunks[c];
  EXPECT_GT(reused, 0);
}

// Every kind of code set the fused rows read, over decode steps that run through token-group
// and block boundaries (a split-K share or a tile can start and end anywhere in a group):
// 2-, 4- and 8-bit planes scored and accumulated straight from their bytes, 1-bit planes and
// 3-, 5- and 6-bit words read from an f32 tile of the run's codes. (The bound is float
// reassociation: a 1-bit residual's coarse pairs reach 2.5e-5 even on the prefill's fetched rows.)
TEST(XQuantCache, FusedDecodeStepsMatchTheFetchedRowsForEveryWidth) {
  std::vector<int64_t> chunks{45};
  for (int i = 0; i < 40; ++i) chunks.push_back(1);
  chunks.push_back(7);
  const struct { int base, residual; } cases[] = {{2, 4}, {4, 8}, {8, 2}, {3, 5}, {6, 0}, {2, 1}, {1, 4}};
  for (const auto& c : cases) {
    {
      XQuantCache fused(c.base, c.residual, 16), plain(c.base, c.residual, 16);
      const std::vector<float> worst = test_support::fused_vs_fetched(fused, plain, 2, 6, 64, chunks, 900);
      for (std::size_t i = 0; i < chunks.size(); ++i) {
        EXPECT_LE(worst[i], 5e-5f) << "anchor " << c.base << " bits, chunk " << i;
      }
    }
    int64_t reused = 0;
    const std::vector<float> worst = reuse_fused_vs_fetched(c.base, c.residual, 16, chunks, &reused);
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      EXPECT_LE(worst[i], 5e-5f) << "reuse " << c.base << " + " << c.residual << " bits, chunk " << i;
    }
    EXPECT_GT(reused, 0);
  }
}

}  // namespace
}  // namespace veloxquant
