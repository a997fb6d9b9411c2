#include "veloxquant/attention/row_ranges_source.h"

#include <algorithm>
#include <string>

#include "base/error.h"

namespace veloxquant::attention {

RowRangesSource::RowRangesSource(const RowSource& base, int64_t batch, int64_t heads) : base_(&base) {
  reset(base, batch, heads);
}

void RowRangesSource::reset(const RowSource& base, int64_t batch, int64_t heads) {
  base_ = &base;
  n_heads_ = heads;
  heads_.resize(static_cast<std::size_t>(batch * heads));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const RowRange all{0, base_->rows(b, h)};
      build(b, h, &all, all.second > 0 ? 1 : 0);
    }
  }
}

void RowRangesSource::set_ranges(int64_t b, int64_t h, const std::vector<RowRange>& ranges) {
  const int64_t n = base_->rows(b, h);
  int64_t last_end = 0;
  for (const RowRange& r : ranges) {
    if (r.first < last_end || r.second <= r.first || r.second > n) {
      throw base::InvalidArgument("RowRangesSource: range [" + std::to_string(r.first) + ", " +
                                  std::to_string(r.second) + ") is empty, overlaps the previous one or lies past " +
                                  std::to_string(n) + " rows");
    }
    last_end = r.second;
  }
  build(b, h, ranges.data(), ranges.size());
}

void RowRangesSource::build(int64_t b, int64_t h, const RowRange* ranges, std::size_t count) {
  Head& head = heads_[index(b, h)];
  head.ranges.assign(ranges, ranges + count);
  head.starts.clear();
  head.positions.clear();
  head.rows = 0;
  const int32_t* base_positions = base_->positions(b, h);
  for (const RowRange& r : head.ranges) {
    head.starts.push_back(head.rows);
    head.rows += r.second - r.first;
    for (int64_t j = r.first; j < r.second; ++j) {
      head.positions.push_back(base_positions ? base_positions[j] : static_cast<int32_t>(base_->position_base() + j));
    }
  }
}

int64_t RowRangesSource::base_row(int64_t b, int64_t h, int64_t j) const {
  const Head& head = heads_[index(b, h)];
  const auto it = std::upper_bound(head.starts.begin(), head.starts.end(), j);
  const std::size_t k = static_cast<std::size_t>(it - head.starts.begin()) - 1;
  return head.ranges[k].first + (j - head.starts[k]);
}

template <class F>
void RowRangesSource::for_pieces(int64_t b, int64_t h, int64_t j0, int64_t j1, F&& f) const {
  const Head& head = heads_[index(b, h)];
  std::size_t k =
      static_cast<std::size_t>(std::upper_bound(head.starts.begin(), head.starts.end(), j0) - head.starts.begin()) - 1;
  for (int64_t j = j0; j < j1; ++k) {
    const RowRange& r = head.ranges[k];
    const int64_t begin = r.first + (j - head.starts[k]);
    const int64_t end = std::min(r.second, begin + (j1 - j));
    f(begin, end, j - j0);
    j += end - begin;
  }
}

void RowRangesSource::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                                 float* scores, int64_t ld, TileScratch& scratch) const {
  for_pieces(b, h, j0, j1, [&](int64_t begin, int64_t end, int64_t at) {
    base_->score_tile(b, h, begin, end, prepared, n_queries, scores + at, ld, scratch);
  });
}

void RowRangesSource::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights,
                                      int64_t n_queries, int64_t ld, float* acc, TileScratch& scratch) const {
  for_pieces(b, h, j0, j1, [&](int64_t begin, int64_t end, int64_t at) {
    base_->accumulate_tile(b, h, begin, end, weights + at, n_queries, ld, acc, scratch);
  });
}

}  // namespace veloxquant::attention
