#pragma once
// The common shape of the vector quantizers in this folder. Each quantizer encodes a vector
// of `dim` floats into exactly code_bytes() bytes (the stored code IS the memory: packed
// indices plus whatever norms/factors the method keeps), decodes it back, and estimates
// inner products against an unquantized query without decoding: prepare_query() rotates /
// sketches the query once and builds lookup tables, score() then reads only the codes.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace veloxquant::quant {

// Per-query state built once and reused for every code scored against that query.
struct PreparedQuery {
  std::vector<float> rotated;  // the query in the quantizer's rotated / sketched space
  std::vector<float> lut;      // byte lookup tables: lut[p * 256 + byte] (layout per method)
  float scale = 1.0f;          // method constant folded into every score
  std::size_t lut_offset = 0;  // where a second table starts in `lut` (turboquant_prod)
};

class Quantizer {
 public:
  virtual ~Quantizer() = default;
  virtual std::string method() const = 0;
  virtual int dim() const = 0;
  virtual int bits() const = 0;                // the method's nominal bit width
  virtual std::size_t code_bytes() const = 0;  // exact bytes of one encoded vector
  // codes: n rows of code_bytes(); x and out: n rows of dim() floats.
  virtual void encode(const float* x, std::size_t n, uint8_t* codes) const = 0;
  virtual void decode(const uint8_t* codes, std::size_t n, float* out) const = 0;
  virtual PreparedQuery prepare_query(const float* query) const = 0;
  // scores[i] = estimate of <query, x_i> for the n codes.
  virtual void score(const PreparedQuery& query, const uint8_t* codes, std::size_t n, float* scores) const = 0;
};

// The quantizer family by name: turboquant_mse, turboquant_prod, qjl, turboquant_rvq, polar,
// rabitq, kivi. Throws QuantizerConfigError naming the bad method, dim or bits.
std::unique_ptr<Quantizer> make_quantizer(const std::string& method, int dim, int bits, uint64_t seed);
const std::vector<std::string>& quantizer_methods();

// Shared validation: throws QuantizerConfigError naming the value.
void check_dim(const std::string& method, int dim);
void check_bits(const std::string& method, int bits, int lo, int hi);

}  // namespace veloxquant::quant
