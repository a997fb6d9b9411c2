// Front-door validation shared by every quantizer: the message names the method, the field
// and the offending value.
#include <string>

#include "veloxquant/errors.h"
#include "veloxquant/quant/quantizer.h"

namespace veloxquant::quant {

void check_dim(const std::string& method, int dim) {
  if (dim < 2 || dim > 65536)
    throw QuantizerConfigError(method + ": head_dim must be in 2..65536, got " + std::to_string(dim));
}

void check_bits(const std::string& method, int bits, int lo, int hi) {
  if (bits < lo || bits > hi)
    throw QuantizerConfigError(method + ": bit_width must be in " + std::to_string(lo) + ".." + std::to_string(hi) +
                               ", got " + std::to_string(bits));
}

}  // namespace veloxquant::quant
