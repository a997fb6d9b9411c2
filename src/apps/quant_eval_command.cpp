// `veloxquant quant-eval`: measures one quantizer on random unit vectors (see
// veloxquant/quant/quant_eval.h for what each number means). Parse, call the library, print.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "apps/command_registry.h"
#include "base/error.h"
#include "veloxquant/quant/quant_eval.h"

namespace {

struct QuantEvalArgs {
  std::string method;
  int bits = 2;
  int dim = 128;
  long long n = 2000;
  unsigned long long seed = 42;
  bool json = false;
};

void run_quant_eval(const QuantEvalArgs& args) {
  if (args.n <= 0 || args.n > 10'000'000)
    throw base::InvalidArgument("quant-eval: --n must be in 1..10000000, got " + std::to_string(args.n));
  const auto r = veloxquant::quant::evaluate_quantizer(args.method, args.bits, args.dim,
                                                       static_cast<std::size_t>(args.n), args.seed);
  if (args.json) {
    nlohmann::ordered_json j;
    j["method"] = r.method;
    j["bits"] = r.bits;
    j["dim"] = r.dim;
    j["n"] = r.n;
    j["mse"] = r.mse;
    j["ip_bias"] = r.ip_bias;
    j["ip_bias_se"] = r.ip_bias_se;
    j["ip_var_scaled"] = r.ip_var_scaled;
    j["shrink"] = r.shrink;
    j["bytes_per_vector"] = r.bytes_per_vector;
    j["encode_vectors_per_s"] = r.encode_vectors_per_s;
    j["score_vectors_per_s"] = r.score_vectors_per_s;
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("method               %s\n", r.method.c_str());
  std::printf("bits                 %d\n", r.bits);
  std::printf("dim                  %d\n", r.dim);
  std::printf("n                    %zu\n", r.n);
  std::printf("mse                  %.6g\n", r.mse);
  std::printf("ip_bias              %.6g\n", r.ip_bias);
  std::printf("ip_bias_se           %.6g\n", r.ip_bias_se);
  std::printf("ip_var_scaled        %.6g\n", r.ip_var_scaled);
  std::printf("shrink               %.6g\n", r.shrink);
  std::printf("bytes_per_vector     %zu\n", r.bytes_per_vector);
  std::printf("encode_vectors_per_s %.6g\n", r.encode_vectors_per_s);
  std::printf("score_vectors_per_s  %.6g\n", r.score_vectors_per_s);
}

apps::CommandRegistration registration{
    "quant-eval", [](CLI::App& root) {
      auto args = std::make_shared<QuantEvalArgs>();
      auto* cmd =
          root.add_subcommand("quant-eval",
                              "Quantize N random unit vectors with one method and report MSE, inner-product bias and "
                              "variance against queries y = 0.6x + 0.8z, bytes per vector and throughput");
      cmd->add_option("--method", args->method,
                      "turboquant_mse, turboquant_prod, qjl, turboquant_rvq, polar, rabitq or kivi")
          ->required();
      cmd->add_option("--bits", args->bits, "bit width, 1..8 (polar: 1..6)")->capture_default_str();
      cmd->add_option("--dim", args->dim, "vector dimension (head_dim)")->capture_default_str();
      cmd->add_option("--n", args->n, "number of random vectors")->capture_default_str();
      cmd->add_option("--seed", args->seed, "seed for the data and the quantizer")->capture_default_str();
      cmd->add_flag("--json", args->json, "print one JSON object");
      cmd->callback([args] { run_quant_eval(*args); });
    }};

}  // namespace
