// The streaming-read probe: it reads, it reports a positive rate for every pass and keeps the
// best, with the thread count and the bytes it really read; bad sizes are refused by value.
#include "base/read_bandwidth.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "base/error.h"

namespace base {
namespace {

TEST(ReadBandwidth, ReportsEveryPassAndTheBest) {
  ThreadPool pool(2);
  // 8 MiB + 100 bytes: rounded down to whole 64-byte lines, 8 MiB + 64.
  const ReadBandwidth r = measure_read_bandwidth(pool, (8u << 20) + 100, 3);
  EXPECT_EQ(r.bytes, (8u << 20) + 64);
  EXPECT_EQ(r.threads, 2);
  ASSERT_EQ(r.pass_bytes_per_s.size(), 3u);
  for (double rate : r.pass_bytes_per_s) EXPECT_GT(rate, 0.0);
  EXPECT_EQ(r.best_bytes_per_s, *std::max_element(r.pass_bytes_per_s.begin(), r.pass_bytes_per_s.end()));
  // Any machine that runs this streams more than 100 MB/s and less than 10 TB/s: outside that
  // range the arithmetic (bytes or seconds) is off by a unit.
  EXPECT_GT(r.best_bytes_per_s, 1e8);
  EXPECT_LT(r.best_bytes_per_s, 1e13);
}

TEST(ReadBandwidth, OneThreadAndASliceSmallerThanThePool) {
  ThreadPool one(1);
  EXPECT_GT(measure_read_bandwidth(one, 4096, 1).best_bytes_per_s, 0.0);
  ThreadPool many(4);  // 64 lines over 4 participants: 16 lines each
  EXPECT_EQ(measure_read_bandwidth(many, 4096, 2).bytes, 4096u);
}

TEST(ReadBandwidth, RefusesSizesByValue) {
  ThreadPool pool(1);
  try {
    measure_read_bandwidth(pool, 100, 1);
    ADD_FAILURE() << "accepted 100 bytes";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("got 100"), std::string::npos) << e.what();
  }
  try {
    measure_read_bandwidth(pool, 1 << 20, 0);
    ADD_FAILURE() << "accepted 0 passes";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("passes must be >= 1, got 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace base
