// Window planning: every target scored exactly once, llama.cpp's chunk arithmetic, errors.
#include "veloxquant/eval/window_plan.h"

#include <gtest/gtest.h>

#include <vector>

#include "base/error.h"

namespace veloxquant::eval {
namespace {

TEST(SlidingWindows, NonOverlappingDropsTheRemainder) {
  const auto w = plan_sliding_windows(10, 4, 4, 1.0);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].begin, 0);
  EXPECT_EQ(w[0].end, 4);
  EXPECT_EQ(w[0].score_begin, 1);  // token 0 has nothing before it in the window
  EXPECT_EQ(w[1].begin, 4);
  EXPECT_EQ(w[1].end, 8);
  EXPECT_EQ(w[1].score_begin, 5);
  EXPECT_FALSE(w[0].first_token_is_bos);
  EXPECT_EQ(w[1].compare_begin, w[1].score_begin);  // tail 1: compare what is scored
}

TEST(SlidingWindows, StridedWindowsScoreEveryTargetOnce) {
  // ctx 4, stride 2 over 10 tokens: windows at 0, 2, 4, 6; targets 1..9 each counted once.
  const auto w = plan_sliding_windows(10, 4, 2, 1.0);
  ASSERT_EQ(w.size(), 4u);
  std::vector<int> counted(10, 0);
  for (const auto& win : w) {
    EXPECT_EQ(win.size(), 4);
    for (int64_t t = win.score_begin; t < win.end; ++t) ++counted[static_cast<std::size_t>(t)];
  }
  EXPECT_EQ(counted[0], 0);
  for (int t = 1; t < 10; ++t) EXPECT_EQ(counted[static_cast<std::size_t>(t)], 1) << "target " << t;
  EXPECT_EQ(w[1].score_begin, 4);
  EXPECT_EQ(w[3].score_begin, 8);
}

TEST(SlidingWindows, TailComparesTheLastQuarter) {
  const auto w = plan_sliding_windows(16, 8, 8, 0.25);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].compare_begin, 6);  // last ceil(0.25 * 8) = 2 targets: 6, 7
  EXPECT_EQ(w[0].compared(), 2);
  EXPECT_EQ(w[1].compare_begin, 14);
  // A tail longer than the scored part is clipped to it.
  const auto s = plan_sliding_windows(16, 8, 2, 0.5);
  EXPECT_EQ(s[1].score_begin, 8);
  EXPECT_EQ(s[1].compare_begin, 8);
}

TEST(LlamaChunks, MatchesLlamaPerplexityArithmetic) {
  // The TinyStories file of ../shared/data is 393,019 tokens with BOS; llama-perplexity -c 256
  // reports 1,535 chunks (data README).
  EXPECT_EQ(plan_llama_chunks(393019, 256, 0, 1.0).size(), 1535u);
  const auto w = plan_llama_chunks(1000, 256, 0, 1.0);
  ASSERT_EQ(w.size(), 3u);
  for (std::size_t i = 0; i < w.size(); ++i) {
    EXPECT_EQ(w[i].begin, static_cast<int64_t>(i) * 256);
    EXPECT_EQ(w[i].end, w[i].begin + 256);
    EXPECT_TRUE(w[i].first_token_is_bos);
    EXPECT_EQ(w[i].score_begin, w[i].begin + 129);  // logits rows 128..254 -> targets 129..255
    EXPECT_EQ(w[i].scored(), 127);                  // n_ctx - 1 - n_ctx/2
  }
  EXPECT_EQ(plan_llama_chunks(1000, 256, 2, 1.0).size(), 2u);
  EXPECT_EQ(plan_llama_chunks(1000, 256, 20, 1.0).size(), 3u);
}

TEST(LlamaChunks, OddContextUsesIntegerHalf) {
  const auto w = plan_llama_chunks(5, 5, 0, 1.0);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].score_begin, 3);  // first = 5/2 = 2, targets 3 and 4
  EXPECT_EQ(w[0].scored(), 2);
}

TEST(WindowPlan, RejectsBadInput) {
  EXPECT_THROW(plan_sliding_windows(100, 256, 256, 1.0), base::InvalidArgument);  // text too short
  EXPECT_THROW(plan_sliding_windows(100, 1, 1, 1.0), base::InvalidArgument);
  EXPECT_THROW(plan_sliding_windows(100, 8, 0, 1.0), base::InvalidArgument);
  EXPECT_THROW(plan_sliding_windows(100, 8, 9, 1.0), base::InvalidArgument);
  EXPECT_THROW(plan_sliding_windows(100, 8, 8, 0.0), base::InvalidArgument);
  EXPECT_THROW(plan_sliding_windows(100, 8, 8, 1.5), base::InvalidArgument);
  EXPECT_THROW(plan_llama_chunks(100, 8, -1, 1.0), base::InvalidArgument);
  EXPECT_THROW(plan_llama_chunks(7, 8, 0, 1.0), base::InvalidArgument);
  try {
    plan_sliding_windows(100, 256, 256, 1.0);
  } catch (const base::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("100"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("256"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace veloxquant::eval
