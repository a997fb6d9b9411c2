#pragma once
// adakv's storage (caches/adakv_cache.h) as one RowSource for the attention driver. Widths change
// from block to block and head to head, so a tile is walked block by block (one width, one tier
// plane and slot, one (scale, min) per key channel each) and every block is read by the kernel
// its width allows, straight from its codes — KIVI's (caches/kivi_row_source.h):
//   * keys of a planar width the integer kernel takes (2, 4, 8 bits at head_dim 64): the block's
//     scales folded into 16-bit queries, rows scored by pairwise integer multiply-adds
//     (attention/integer_key_scores.h);
//   * keys of the other widths (3 bits): scored from their words by word planes
//     (attention/word_plane_scores.h), no gather and no f32 tile;
//   * values: group-affine rows accumulated with each row's group scale folded into the weights,
//     from their packed planes where the width allows (caches/group_affine_rows.h).
// The prepared query holds one copy per tier, each in that tier's code order. The incomplete
// block's rows are read from the input-dtype tail as they are.
#include <array>
#include <cstdint>
#include <optional>

#include "veloxquant/attention/code_rows.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/row_source.h"
#include "veloxquant/caches/kivi_row_source.h"

namespace veloxquant {

class AdaKVCache;

// How each tier's rows are read (built once per cache shape, outside the per-step path).
struct AdaKVTierLayout {
  AdaKVTierLayout(int bits, int64_t key_dim, int64_t value_dim, int64_t group);
  int bits;
  bool planar_keys;                    // planar codes scored from their bytes, query in f32
  attention::CodeOrder key_order;      // planar widths: the order codes unpack in
  attention::CodeOrder value_order;    // with the value channel-group size
  std::optional<WordPlaneKeys> words;  // non-planar widths
  int64_t offset = 0;                  // of this tier's copy in a prepared query
  int64_t dim() const { return words ? words->planes.dim() : key_order.size(); }
};

struct AdaKVLayouts {
  AdaKVLayouts(const std::array<int, 3>& bits, int64_t key_dim, int64_t value_dim, int64_t group);
  bool matches(const std::array<int, 3>& bits, int64_t key_dim, int64_t value_dim, int64_t group) const;
  std::array<AdaKVTierLayout, 3> tiers;
  int64_t key_dim, value_dim, group, prepared_dim;
};

class AdaKVRows final : public attention::RowSource {
 public:
  AdaKVRows(const AdaKVCache& cache, const AdaKVLayouts& layouts);

  int64_t key_dim() const override;
  int64_t value_dim() const override;
  int64_t rows(int64_t, int64_t) const override;
  int64_t prepared_dim() const override { return layouts_.prepared_dim; }
  void prepare_query(const float* query, float* prepared) const override;
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;

 private:
  const AdaKVCache& cache_;
  const AdaKVLayouts& layouts_;
  attention::PlainRows tail_k_, tail_v_;
};

}  // namespace veloxquant
