// Position-preserving row storage: in-place compaction keeps temporal order and true positions,
// the storage grows with the rows held up to the budget, and restore refuses state that does not
// fit.
#include <gtest/gtest.h>

#include "base/error.h"
#include "veloxquant/eviction/eviction_rows.h"

namespace veloxquant::eviction {
namespace {

std::vector<float> decoded(const EvictionRows& rows) {
  std::vector<float> out(static_cast<std::size_t>(rows.rows() * rows.key_dim()));
  rows.decode_keys(0, 0, out.data());
  return out;
}

TEST(EvictionRows, ABudgetNoMachineHoldsIsRefusedBeforeAllocating) {
  // h2o_budget=2147483647 asked for 128 GiB and failed with a bare std::bad_alloc.
  EvictionRows rows(2147483647, true, StorageSpec{});
  try {
    rows.allocate(1, 3, 64, 64, lm::DType::F16);
    FAIL() << "allocated";
  } catch (const base::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("an eviction budget of 2147483647 rows per kv head"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("GiB, more than this machine's"), std::string::npos) << e.what();
  }
}

TEST(EvictionRows, CompactionKeepsOrderPositionsAndScores) {
  EvictionRows rows(4, true, StorageSpec{});
  rows.allocate(1, 1, 2, 2, lm::DType::F32);
  EXPECT_EQ(rows.nbytes(), 0u);  // nothing held before the first rows
  rows.reserve(3);
  // 8 bytes of keys, 8 of values, 4 position, 4 score per row; room for 3 rows is the whole
  // budget of 4 (less than one growth step).
  EXPECT_EQ(rows.nbytes(), 4u * (8 + 8 + 4 + 4));
  const float k1[] = {0, 0, 1, 1, 2, 2};  // tokens at positions 0, 1, 2
  const int32_t p1[] = {0, 1, 2};
  const float s1[] = {0.5f, 0.25f, 0.125f};
  rows.compact(0, 0, {0, 1, 2}, p1, s1, k1, k1);
  rows.commit_rows(3);
  EXPECT_EQ(decoded(rows), (std::vector<float>{0, 0, 1, 1, 2, 2}));
  // Next call: candidates = 3 stored + 2 new (positions 3, 4); keep stored 0 and 2, both new.
  const float k2[] = {3, 3, 4, 4};
  const int32_t p2[] = {0, 1, 2, 3, 4};
  const float s2[] = {0.5f, 0.25f, 0.125f, 1.0f, 2.0f};
  rows.compact(0, 0, {0, 2, 3, 4}, p2, s2, k2, k2);
  rows.commit_rows(4);
  EXPECT_EQ(decoded(rows), (std::vector<float>{0, 0, 2, 2, 3, 3, 4, 4}));
  EXPECT_EQ(std::vector<int32_t>(rows.positions(0, 0), rows.positions(0, 0) + 4), (std::vector<int32_t>{0, 2, 3, 4}));
  EXPECT_EQ(std::vector<float>(rows.scores(0, 0), rows.scores(0, 0) + 4),
            (std::vector<float>{0.5f, 0.125f, 1.0f, 2.0f}));
  rows.reserve(5);
  EXPECT_EQ(rows.nbytes(), 4u * (8 + 8 + 4 + 4));                                       // never past the budget
  EXPECT_THROW(rows.compact(0, 0, {0, 1, 2, 3, 4}, p2, s2, k2, k2), std::logic_error);  // over budget
}

// A decode step's replace_row leaves what compact() with every candidate but the victim leaves
// (the general path's result), for each possible victim, for no victim (an append), and for a
// head of several where only one changes.
TEST(EvictionRows, ReplaceRowEqualsCompactingEveryCandidateButTheVictim) {
  const int64_t stored = 5;
  std::vector<float> keys, values;
  std::vector<int32_t> positions;
  std::vector<float> scores;
  for (int64_t j = 0; j <= stored; ++j) {  // row `stored` is the new one
    keys.insert(keys.end(), {float(j), float(10 + j), float(-j)});
    values.insert(values.end(), {float(100 + j), float(j * j), float(0.5 * j)});
    positions.push_back(static_cast<int32_t>(3 * j + 1));
    scores.push_back(0.25f * float(j + 1));
  }
  const auto filled = [&](int64_t budget) {
    EvictionRows rows(budget, true, StorageSpec{});
    rows.allocate(1, 2, 3, 3, lm::DType::F32);
    rows.reserve(stored);
    std::vector<int32_t> all;
    all.reserve(static_cast<std::size_t>(stored));
    for (int32_t j = 0; j < stored; ++j) all.push_back(j);
    for (int64_t h = 0; h < 2; ++h)
      rows.compact(0, h, all, positions.data(), scores.data(), keys.data(), values.data());
    rows.commit_rows(stored);
    return rows;
  };
  const auto head = [](const EvictionRows& rows, int64_t h) {
    std::vector<float> k(static_cast<std::size_t>(rows.rows() * 3)), v(k.size());
    rows.decode_keys(0, h, k.data());
    rows.decode_values(0, h, v.data());
    std::vector<float> out = k;
    out.insert(out.end(), v.begin(), v.end());
    for (int64_t j = 0; j < rows.rows(); ++j) {
      out.push_back(float(rows.positions(0, h)[j]));
      out.push_back(rows.scores(0, h)[j]);
    }
    return out;
  };
  const float* new_key = keys.data() + stored * 3;
  const float* new_value = values.data() + stored * 3;
  for (int64_t victim = -1; victim < stored; ++victim) {
    EvictionRows fast = filled(victim < 0 ? stored + 1 : stored), general = filled(victim < 0 ? stored + 1 : stored);
    fast.reserve(stored + 1);
    general.reserve(stored + 1);
    fast.replace_row(0, 1, victim, positions[stored], scores[stored], new_key, new_value);
    std::vector<int32_t> kept;
    for (int32_t j = 0; j <= stored; ++j) {
      if (j != victim) kept.push_back(j);
    }
    general.compact(0, 1, kept, positions.data(), scores.data(), new_key, new_value);
    const int64_t rows = victim < 0 ? stored + 1 : stored;
    fast.commit_rows(rows);
    general.commit_rows(rows);
    EXPECT_EQ(head(fast, 1), head(general, 1)) << "victim " << victim;
    if (victim >= 0) {
      EXPECT_EQ(head(fast, 0), head(filled(stored), 0)) << "the other head moved, victim " << victim;
    }
  }
  EvictionRows full = filled(stored);  // no room to append past the budget
  EXPECT_THROW(full.replace_row(0, 0, -1, 99, 0.0f, new_key, new_value), std::logic_error);
  EXPECT_THROW(full.replace_row(0, 0, stored, 99, 0.0f, new_key, new_value), std::logic_error);
}

// Many decode steps at a full budget: victims near the front turn the head's ring (rows before
// the victim move up) and wrap it past its last slot, victims near the back move the rows after
// it. The rows, positions and scores always equal a plain list that erases the victim and
// appends the new row; state() written out of a turned ring restores to the same rows; a
// multi-token compact() after that still keeps the right rows; write_keys splits at the wrap.
TEST(EvictionRows, RingTurnsAndWrapsAndStaysInOrder) {
  const int64_t budget = 6, dim = 2;
  EvictionRows rows(budget, true, StorageSpec{});
  rows.allocate(1, 1, dim, dim, lm::DType::F32);
  struct Row {
    float key, value;
    int32_t position;
    float score;
  };
  std::vector<Row> want;
  const auto put = [&](int64_t victim, int32_t p) {
    const Row r{float(p), float(1000 + p), p, 0.5f * float(p)};
    const float k[] = {r.key, -r.key}, v[] = {r.value, 2 * r.value};
    if (victim < 0) rows.reserve(rows.rows() + 1);
    rows.replace_row(0, 0, victim, r.position, r.score, k, v);
    rows.commit_rows(victim < 0 ? rows.rows() + 1 : rows.rows());
    if (victim >= 0) want.erase(want.begin() + victim);
    want.push_back(r);
  };
  const auto check = [&](const EvictionRows& got, const std::string& when) {
    ASSERT_EQ(got.rows(), static_cast<int64_t>(want.size())) << when;
    std::vector<float> k(want.size() * dim), v(k.size());
    got.decode_keys(0, 0, k.data());
    got.decode_values(0, 0, v.data());
    std::vector<float> written(k.size());
    got.write_keys(0, 0, lm::DType::F32, reinterpret_cast<std::byte*>(written.data()));
    for (std::size_t j = 0; j < want.size(); ++j) {
      EXPECT_EQ(k[2 * j], want[j].key) << when << ", row " << j;
      EXPECT_EQ(k[2 * j + 1], -want[j].key) << when << ", row " << j;
      EXPECT_EQ(v[2 * j + 1], 2 * want[j].value) << when << ", row " << j;
      EXPECT_EQ(written[2 * j], want[j].key) << when << ", row " << j;
      EXPECT_EQ(got.positions(0, 0)[j], want[j].position) << when << ", row " << j;
      EXPECT_EQ(got.scores(0, 0)[j], want[j].score) << when << ", row " << j;
    }
  };
  int32_t p = 0;
  for (; p < budget; ++p) put(-1, p);
  check(rows, "filled");
  // 1 and 0 move the front (the ring turns; 7 front moves wrap it past slot 5); 4 and 5 the back.
  const int64_t victims[] = {1, 0, 4, 1, 1, 5, 0, 2, 1, 0, 3, 1, 0};
  for (const int64_t victim : victims) {
    put(victim, p++);
    check(rows, "after the step to position " + std::to_string(p - 1));
  }
  EvictionRows restored(budget, true, StorageSpec{});
  restored.restore(rows.state(), dim, dim, lm::DType::F32, "test");
  check(restored, "restored");
  // The general path: keep rows 0, 2, 5 and one new row at position 99.
  const std::vector<int32_t> kept = {0, 2, 5, 6};
  std::vector<int32_t> positions;
  std::vector<float> scores;
  for (const Row& r : want) {
    positions.push_back(r.position);
    scores.push_back(r.score);
  }
  positions.push_back(99);
  scores.push_back(7.0f);
  const float k_new[] = {99.0f, -99.0f}, v_new[] = {1099.0f, 2198.0f};
  rows.compact(0, 0, kept, positions.data(), scores.data(), k_new, v_new);
  rows.commit_rows(4);
  want = {want[0], want[2], want[5], Row{99.0f, 1099.0f, 99, 7.0f}};
  check(rows, "compacted");
}

TEST(EvictionRows, StateRoundTripAndMismatchedState) {
  EvictionRows rows(3, false, StorageSpec{});
  rows.allocate(1, 2, 4, 4, lm::DType::F16);
  const float k[] = {1, 2, 3, 4, 5, 6, 7, 8};
  const int32_t p[] = {7, 9};
  rows.reserve(2);
  for (int64_t h = 0; h < 2; ++h) rows.compact(0, h, {0, 1}, p, nullptr, k, k);
  rows.commit_rows(2);
  EvictionRows restored(3, false, StorageSpec{});
  restored.restore(rows.state(), 4, 4, lm::DType::F16, "test");
  EXPECT_EQ(decoded(restored), decoded(rows));
  EXPECT_EQ(restored.positions(0, 1)[1], 9);
  EXPECT_EQ(restored.nbytes(), rows.nbytes());
  EvictionRows small(1, false, StorageSpec{});  // 2 rows do not fit a budget of 1
  EXPECT_THROW(small.restore(rows.state(), 4, 4, lm::DType::F16, "test"), base::FormatError);
  EvictionRows wide(3, false, StorageSpec{});  // f32 rows are twice as wide as the stored f16 ones
  EXPECT_THROW(wide.restore(rows.state(), 4, 4, lm::DType::F32, "test"), base::FormatError);
  EvictionRows scored(3, true, StorageSpec{});  // scores expected, none saved
  EXPECT_THROW(scored.restore(rows.state(), 4, 4, lm::DType::F16, "test"), base::FormatError);
}

TEST(EvictionRows, StorageGrowsWithTheRowsHeldInStepsUpToTheBudget) {
  // A budget of 100 rows, 2 heads of f16 rows of dim 4: 8 + 8 bytes of key and value, 4 of
  // position, 4 of score per row and head.
  constexpr std::size_t kRowBytes = std::size_t{2} * (8 + 8 + 4 + 4);
  EvictionRows rows(100, true, StorageSpec{});
  rows.allocate(1, 2, 4, 4, lm::DType::F16);
  rows.reserve(13);
  EXPECT_EQ(rows.capacity(), 32);
  EXPECT_EQ(rows.nbytes(), 32 * kRowBytes);
  std::vector<float> k(std::size_t{13} * 4);
  std::vector<int32_t> p(13);
  std::vector<float> sc(13);
  std::vector<int32_t> kept(13);
  for (int i = 0; i < 13; ++i) {
    for (int d = 0; d < 4; ++d)
      k[static_cast<std::size_t>(i) * 4 + static_cast<std::size_t>(d)] = static_cast<float>(i);
    p[static_cast<std::size_t>(i)] = 100 + i;
    sc[static_cast<std::size_t>(i)] = 0.5f * static_cast<float>(i);
    kept[static_cast<std::size_t>(i)] = i;
  }
  for (int64_t h = 0; h < 2; ++h) rows.compact(0, h, kept, p.data(), sc.data(), k.data(), k.data());
  rows.commit_rows(13);
  const std::vector<float> before = decoded(rows);
  rows.reserve(33);  // regrown: every head's rows, positions and scores carried over
  EXPECT_EQ(rows.capacity(), 64);
  EXPECT_EQ(rows.nbytes(), 64 * kRowBytes);
  EXPECT_EQ(decoded(rows), before);
  for (int64_t h = 0; h < 2; ++h) {
    EXPECT_EQ(std::vector<int32_t>(rows.positions(0, h), rows.positions(0, h) + 13), p);
    EXPECT_EQ(std::vector<float>(rows.scores(0, h), rows.scores(0, h) + 13), sc);
  }
  rows.reserve(20);  // never shrinks
  EXPECT_EQ(rows.capacity(), 64);
  rows.reserve(1000);  // at most the budget
  EXPECT_EQ(rows.capacity(), 100);
  EXPECT_EQ(rows.nbytes(), 100 * kRowBytes);
  EXPECT_EQ(decoded(rows), before);
}

}  // namespace
}  // namespace veloxquant::eviction
