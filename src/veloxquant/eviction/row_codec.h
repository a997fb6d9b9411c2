#pragma once
// How an eviction cache stores one retained row (a key or a value vector of one token of one
// head). Eviction drops rows; a codec decides what each kept row costs. Every codec has a fixed
// byte size per row, so the position-preserving storage (eviction_rows.h) is a plain array of
// byte rows that compaction moves with memmove, whatever the codec:
//   dtype           the host's KV dtype, exact (the original's only storage);
//   turboquant_rvq  quant::TurboQuantRvq's code [stage1 | stage2 | bf16 norm] (keys);
//   group_affine    b-bit codes packed in words + per-group f16 (scale, min) (KIVI's per-token
//                   value layout, rows/group_affine_codes.h).
// Composition (new in this port, the original cannot do it) picks the key and value codecs from
// the `eviction_storage` option; see make_key_codec / make_value_codec.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "lm/dtype.h"
#include "veloxquant/config/kv_cache_config.h"

namespace veloxquant::quant {
class TurboQuantRvq;
}

namespace veloxquant::eviction {

class RowCodec {
 public:
  virtual ~RowCodec() = default;
  virtual std::size_t row_bytes() const = 0;
  // x: `dim` floats -> row_bytes() bytes at `row` (no alignment assumed).
  virtual void encode(const float* x, std::byte* row) const = 0;
  virtual void decode(const std::byte* row, float* x) const = 0;
  // n_rows rows `row_bytes` apart (row_bytes() or more) into out[n_rows * dim]: the attention
  // driver's tile. Default: decode() row by row; codecs with a tile kernel override it.
  virtual void decode_rows(const std::byte* first_row, int64_t row_bytes, int64_t n_rows, int dim, float* out) const;
  // True when decode(encode(x)) == x for every x the host can feed in the codec's dtype.
  virtual bool exact() const = 0;
  // The turboquant_rvq quantizer whose code [stage1 | stage2 | bf16 norm] the rows hold, for
  // readers that score the codes in the rotated basis; nullptr for the other codecs.
  virtual const quant::TurboQuantRvq* rvq_quantizer() const { return nullptr; }
};

std::shared_ptr<const RowCodec> make_dtype_codec(int dim, lm::DType dtype);
std::shared_ptr<const RowCodec> make_rvq_codec(int dim, int bits, int64_t seed, const std::string& stage2_scale);
std::shared_ptr<const RowCodec> make_group_affine_codec(int dim, int bits, int group);

// The storage the config asks for: "dtype", "turboquant_rvq" or "kivi" (spec of the option in
// config/method_options.h). Throws QuantizerConfigError naming eviction_storage and the value.
enum class StorageKind { kDtype, kTurboQuantRvq, kKivi };
StorageKind parse_storage_kind(const std::string& name);
const char* storage_kind_name(StorageKind kind);

// What the codecs of one cache are made from: fixed at construction, the dtype comes with the
// first update.
struct StorageSpec {
  StorageKind kind = StorageKind::kDtype;
  int bits = 2;            // bit_width_inlier (turboquant_rvq keys, kivi keys and values)
  int group = 32;          // kivi_group_size (kivi storage)
  int rvq_value_bits = 0;  // turboquant_rvq storage: 0 = values in the dtype, 2..8 group-affine (group 32)
  int64_t seed = 42;
  std::string rvq_stage2_scale = "matched";
};
StorageSpec storage_spec_from(const KVCacheConfig& config);

std::shared_ptr<const RowCodec> make_key_codec(const StorageSpec& spec, int dim, lm::DType dtype);
std::shared_ptr<const RowCodec> make_value_codec(const StorageSpec& spec, int dim, lm::DType dtype);

}  // namespace veloxquant::eviction
