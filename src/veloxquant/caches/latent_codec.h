#pragma once
// What a "true latent" cache (caches/latent_cache.h: palu, kvtc) needs from its method: how many
// principal components of a head group to keep, and how one token's latent coordinates are
// stored. The cache owns the basis (PCA of the first rows, per batch and head group), the
// per-token code rows and the attention; the codec owns the row format and whatever it fitted
// (kvtc's per-component bits and ranges), as tensors that travel with the cache's state.
//
// One codec serves one side (keys or values) of one layer, for every (batch, head group).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lm/tensor.h"
#include "veloxquant/attention/affine_part_planes.h"
#include "veloxquant/attention/bit_field_rows.h"

namespace veloxquant {

class LatentCodec {
 public:
  virtual ~LatentCodec() = default;
  virtual std::unique_ptr<LatentCodec> clone() const = 0;

  // Before any fit: `batch` x `groups` head groups whose concatenated rows are `width` wide.
  virtual void allocate(int64_t batch, int64_t groups, int64_t width) = 0;
  // Components kept for (b, g) given the PCA variances (descending, `width` of them); >= 1.
  virtual int64_t choose_rank(int64_t b, int64_t g, const std::vector<double>& variance) = 0;
  // Fits the row format of (b, g) on the fitting rows' latents [n, rank] (rank = choose_rank's).
  virtual void fit(int64_t b, int64_t g, const float* latents, int64_t n, int64_t rank) = 0;
  // Bytes of one stored row of (b, g) (after choose_rank).
  virtual int64_t row_bytes(int64_t b, int64_t g) const = 0;
  // One token's latent (rank floats) into its row, and rows back to latents [n, rank] (f32).
  virtual void encode(int64_t b, int64_t g, const float* latent, uint8_t* row) const = 0;
  virtual void decode_rows(int64_t b, int64_t g, const uint8_t* first, int64_t stride, int64_t n, float* out) const = 0;
  // The same latents as decode_rows laid out as a pair tile (attention/latent_pair_tiles.h; n a
  // multiple of 8), which the key scorer reads with fewer loads and no scalar tail. false: the
  // codec has no such decoder, and the attention scores decode_rows' rows.
  virtual bool decode_pair_tile(int64_t /*b*/, int64_t /*g*/, const uint8_t* /*first*/, int64_t /*stride*/,
                                int64_t /*n*/, float* /*tile*/) const {
    return false;
  }

  // The fitted tensors (empty before the fit), their restore, and their allocated bytes.
  virtual std::vector<lm::Tensor> state() const = 0;
  virtual void restore(const std::vector<lm::Tensor>& tensors) = 0;
  virtual std::size_t nbytes() const = 0;
  // The method's options as meta_state strings (the same for both sides) and their parse.
  virtual std::vector<std::string> meta() const = 0;
  virtual void set_meta(const std::vector<std::string>& meta) = 0;
  virtual std::size_t meta_size() const = 0;
  // Rows made of group-affine parts (attention/affine_part_rows.h: palu) name their parts and the
  // plane layout the attention reads them in (attention/affine_part_planes.h: one SIMD pass per
  // tile, scored and accumulated there); false: the attention reads decode_rows' latents.
  struct PlaneRows {
    const attention::kernels::AffinePart* parts = nullptr;
    int64_t n_parts = 0;
    const attention::kernels::AffinePlaneLayout* layout = nullptr;
  };
  virtual bool plane_rows(int64_t /*b*/, int64_t /*g*/, PlaneRows* /*out*/) const { return false; }
  // Key rows whose component i is lo[i] + step[i] * code_i, the codes bit fields of `layout`
  // (kvtc): the attention scores them from the integer codes (attention/code_row_scores.h)
  // instead of decoding them to floats. false: decode_rows' latents.
  struct IntegerKeys {
    const attention::kernels::BitFieldLayout* layout = nullptr;
    const float* step = nullptr;
    const float* lo = nullptr;
  };
  virtual bool integer_keys(int64_t /*b*/, int64_t /*g*/, IntegerKeys* /*out*/) const { return false; }
  // Rows of the same form, on either side (kvtc): where the integer kernels run fast (AMX), the
  // attention sums the weighted value codes in integers and applies lo and step once per tile
  // (attention/code_value_sums.h), and scores the key codes against fixed-point queries
  // (attention/code_key_scores.h), instead of decoding every row to floats. The key side's
  // codec answers for the key rows (whatever its integer_keys option). Same struct as
  // integer_keys; false: decode_rows' latents.
  virtual bool code_values(int64_t /*b*/, int64_t /*g*/, IntegerKeys* /*out*/) const { return false; }
  // Whether a fused call with many queries (a prefill chunk) may attend over the rebuilt rows
  // (LatentCache::rebuild_rows_for) instead of in the latent space: the same attention up to
  // rounding, so a method opts in (kvtc) and the others keep their prefill numbers (palu).
  virtual bool prefill_over_rebuilt_rows() const { return false; }
  // Rows the cache keeps as given before fitting, for rows `width` wide (at least 64).
  virtual int64_t min_fit_rows(int64_t /*width*/) const { return 64; }
};

}  // namespace veloxquant
