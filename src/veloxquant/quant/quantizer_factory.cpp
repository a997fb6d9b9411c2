// The quantizer family by name (quant-eval, benchmarks, tests enumerate this list).
#include <string>

#include "veloxquant/errors.h"
#include "veloxquant/quant/kivi.h"
#include "veloxquant/quant/polar.h"
#include "veloxquant/quant/qjl.h"
#include "veloxquant/quant/quantizer.h"
#include "veloxquant/quant/rabitq.h"
#include "veloxquant/quant/turboquant_mse.h"
#include "veloxquant/quant/turboquant_prod.h"
#include "veloxquant/quant/turboquant_rvq.h"

namespace veloxquant::quant {

const std::vector<std::string>& quantizer_methods() {
  static const std::vector<std::string> names = {"turboquant_mse", "turboquant_prod", "qjl", "turboquant_rvq",
                                                 "polar",          "rabitq",          "kivi"};
  return names;
}

std::unique_ptr<Quantizer> make_quantizer(const std::string& method, int dim, int bits, uint64_t seed) {
  if (method == "turboquant_mse") return std::make_unique<TurboQuantMse>(dim, bits, seed);
  if (method == "turboquant_prod") return std::make_unique<TurboQuantProd>(dim, bits, seed);
  if (method == "qjl") return std::make_unique<Qjl>(dim, bits, seed);
  if (method == "turboquant_rvq") return std::make_unique<TurboQuantRvq>(dim, bits, seed);
  if (method == "polar") return std::make_unique<Polar>(dim, bits, seed);
  if (method == "rabitq") return std::make_unique<RaBitQ>(dim, bits, seed);
  if (method == "kivi") return std::make_unique<Kivi>(dim, bits, seed);
  std::string valid;
  for (const auto& name : quantizer_methods()) valid += (valid.empty() ? "" : ", ") + name;
  throw QuantizerConfigError("unknown quantizer method '" + method + "' (valid: " + valid + ")");
}

}  // namespace veloxquant::quant
