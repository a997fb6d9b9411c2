#include "veloxquant/eval/host_bench_methods.h"

#include <algorithm>
#include <set>

#include "base/error.h"

namespace veloxquant::eval {

std::vector<MethodBenchRow> run_host_bench_methods(const lm::Model& model, std::span<const int32_t> prompt,
                                                   const HostBenchOptions& options,
                                                   const std::vector<BenchCache>& caches) {
  if (caches.empty()) throw base::InvalidArgument("bench-host: no cache to time");
  std::set<std::string> labels;
  for (const auto& cache : caches) {
    if (!cache.make_caches) throw base::InvalidArgument("bench-host: cache '" + cache.label + "' has no factory");
    if (!labels.insert(cache.label).second) {
      throw base::InvalidArgument("bench-host: two caches are labelled '" + cache.label + "'");
    }
  }
  validate_host_bench(options, model.config().context_length);
  const std::vector<HostBenchRow> plan = host_bench_plan(options);
  int64_t needed = 0;
  for (const auto& row : plan) needed = std::max(needed, row.ctx);
  if (static_cast<int64_t>(prompt.size()) < needed) {
    throw base::InvalidArgument("the prompt holds " + std::to_string(prompt.size()) + " tokens, the runs need " +
                                std::to_string(needed));
  }

  std::vector<MethodBenchRow> rows;
  for (const auto& planned : plan) {
    for (const auto& cache : caches) rows.push_back({cache.label, planned, {}, 0.0, {}, {}, {}});
  }
  for (int round = 0; round < options.repeat; ++round) {
    for (std::size_t p = 0; p < plan.size(); ++p) {
      const auto row_prompt = prompt.first(static_cast<std::size_t>(plan[p].prefill_tokens));
      for (std::size_t c = 0; c < caches.size(); ++c) {
        MethodBenchRow& out = rows[p * caches.size() + c];
        if (options.on_run)
          options.on_run(caches[c].label + ": " + plan[p].kind + " " + std::to_string(plan[p].ctx), round);
        const HostBenchRun run =
            time_host_run(model, caches[c].make_caches, row_prompt, plan[p].decode_tokens, options.batch);
        const double decode_seconds = decode_seconds_by(run, options.decode_statistic);
        out.rounds.emplace_back(run.prefill_seconds, decode_seconds);
        if (round == 0 || run.prefill_seconds < out.row.prefill_seconds) out.row.prefill_seconds = run.prefill_seconds;
        if (round == 0 || decode_seconds < out.row.decode_seconds) out.row.decode_seconds = decode_seconds;
        out.row.kv_bytes = run.kv_bytes;
      }
    }
  }
  for (auto& out : rows) {
    fill_rates(out.row);
    const bool decodes = out.row.decode_tokens > 0;
    double slowest = 0.0, fastest = 0.0;
    for (std::size_t i = 0; i < out.rounds.size(); ++i) {
      const double t = decodes ? out.rounds[i].second : out.rounds[i].first;
      slowest = i == 0 ? t : std::max(slowest, t);
      fastest = i == 0 ? t : std::min(fastest, t);
    }
    out.spread = fastest > 0 ? slowest / fastest : 0.0;
  }
  fill_ratios(rows);
  return rows;
}

void fill_ratios(std::vector<MethodBenchRow>& rows, const std::string& baseline) {
  for (auto& row : rows) {
    row.decode_ratio.reset();
    row.prefill_ratio.reset();
    const auto base = std::find_if(rows.begin(), rows.end(), [&](const MethodBenchRow& b) {
      return b.label == baseline && b.row.kind == row.row.kind && b.row.ctx == row.row.ctx;
    });
    if (base == rows.end()) continue;
    if (row.row.decode_tokens > 0 && base->row.decode_tokens_per_s > 0) {
      row.decode_ratio = row.row.decode_tokens_per_s / base->row.decode_tokens_per_s;
    }
    if (base->row.prefill_tokens_per_s > 0) {
      row.prefill_ratio = row.row.prefill_tokens_per_s / base->row.prefill_tokens_per_s;
    }
  }
}

void fill_traffic(std::vector<MethodBenchRow>& rows, std::size_t weight_bytes, double probe_bytes_per_s) {
  for (auto& row : rows) {
    row.traffic.reset();
    if (row.row.decode_tokens <= 0) continue;
    const double seconds_per_token = row.row.decode_seconds / static_cast<double>(row.row.decode_tokens);
    row.traffic = decode_traffic(weight_bytes, row.row.kv_bytes, seconds_per_token, probe_bytes_per_s);
  }
}

}  // namespace veloxquant::eval
