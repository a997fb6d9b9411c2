#include "apps/serve/generation_engine.h"

#include <algorithm>
#include <exception>

#include "apps/serve/openai_request.h"
#include "apps/serve/stop_sequences.h"
#include "base/error.h"
#include "lm/dtype.h"
#include "lm/cache/full_kv_cache.h"
#include "lm/stats.h"
#include "veloxquant/builder/kv_cache_builder.h"
#include "veloxquant/errors.h"
#include "veloxquant/integration/prompt_cache_types.h"

namespace apps::serve {

// ---- Job channel ----

JobEvent Job::next(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!ready_.wait_for(lock, wait, [&] { return !events_.empty(); })) return JobEvent{};
  JobEvent event = std::move(events_.front());
  events_.pop_front();
  return event;
}

void Job::push(JobEvent event) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_one();
}

void Job::push_text(std::string text) {
  JobEvent e;
  e.kind = JobEvent::Kind::kText;
  e.text = std::move(text);
  push(std::move(e));
}

void Job::finish(JobResult result) {
  JobEvent e;
  e.kind = JobEvent::Kind::kDone;
  e.result = std::move(result);
  push(std::move(e));
}

void Job::fail(int status, std::string message) {
  JobEvent e;
  e.kind = JobEvent::Kind::kError;
  e.status = status;
  e.text = std::move(message);
  push(std::move(e));
}

// ---- Engine ----

namespace {

std::string selection_key(const KvMethodFlags& flags) {
  std::vector<std::string> sets = flags.sets;
  std::sort(sets.begin(), sets.end());
  std::string key = "preset=" + flags.preset + ";method=" + flags.method + ";bits=" + flags.bits +
                    ";seed=" + std::to_string(flags.seed);
  for (const std::string& s : sets) key += ";" + s;
  return key;
}

}  // namespace

Engine::Engine(lm::LoadedModel loaded, ServeOptions options, KvMethodFlags default_cache)
    : loaded_(std::move(loaded)),
      options_(options),
      prefix_pool_(options.prompt_cache_entries, options.prompt_cache_bytes) {
  if (options_.parallel < 1)
    throw base::InvalidArgument("--parallel must be >= 1, got " + std::to_string(options_.parallel));
  veloxquant::integration::register_prompt_cache_types();
  context_length_ = options_.context_length > 0 ? options_.context_length : loaded_.model->config().context_length;
  default_cache_ = resolve_cache(default_cache);
  make_caches(default_cache_);  // a configuration that does not fit the model fails at start-up
  for (int i = 0; i < options_.parallel; ++i) slots_.push_back(std::make_unique<Slot>());
  for (int i = 0; i < options_.parallel; ++i) workers_.emplace_back([this, i] { worker(i); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    stopping_ = true;
    for (auto& job : queue_) {
      job->cancel();
      job->fail(503, "the server is shutting down");
    }
    queue_.clear();
  }
  queue_ready_.notify_all();
  for (auto& w : workers_) w.join();
}

CacheSelection Engine::resolve_cache(const std::optional<KvMethodFlags>& choice) const {
  if (!choice) return default_cache_;
  CacheSelection s;
  try {
    s.config = kv_config_from_flags(*choice);
  } catch (const std::invalid_argument& e) {  // QuantizerConfigError, base::InvalidArgument
    throw ApiError(400, std::string("veloxquant: ") + e.what(), "veloxquant");
  } catch (const std::exception& e) {
    throw ApiError(400, std::string("veloxquant: ") + e.what(), "veloxquant");
  }
  s.label = !choice->preset.empty() ? "preset " + choice->preset + ": " + s.config->method
            : s.config              ? s.config->method
                                    : "none";
  s.bits = choice->bits;
  s.settings = kv_settings_text(*choice);
  s.key = selection_key(*choice);
  return s;
}

lm::CacheList Engine::make_caches(const CacheSelection& selection) const {
  if (!selection.config) return loaded_.model->native_make_cache();
  try {
    return veloxquant::KVCacheBuilder::for_model(*loaded_.model, *selection.config);
  } catch (const std::invalid_argument& e) {
    throw ApiError(400, std::string("veloxquant: ") + e.what(), "veloxquant");
  }
}

void Engine::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    if (stopping_) throw ApiError(503, "the server is shutting down", "", "server_error");
    if (queue_.size() >= options_.max_queue) {
      throw ApiError(503,
                     "the queue is full (" + std::to_string(queue_.size()) + " requests wait for " +
                         std::to_string(options_.parallel) + " slot(s)); retry later",
                     "", "server_error");
    }
    queue_.push_back(job);
  }
  queue_ready_.notify_one();
}

void Engine::worker(int slot_index) {
  Slot& slot = *slots_[static_cast<std::size_t>(slot_index)];
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(queue_mutex_);
      queue_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    if (job->cancelled()) {  // the client left while it waited
      ++jobs_cancelled_;
      job->fail(499, "cancelled");
      continue;
    }
    slot.busy = true;
    {
      std::lock_guard<std::mutex> lock(slot.label_mutex);
      slot.method = job->cache.label;
    }
    job->mark_started();
    // The slot is released before the client hears the outcome, so that /metrics read after
    // an answer never shows its slot still busy.
    try {
      run(*job, slot);
    } catch (const ApiError& e) {
      ++jobs_failed_;
      release(slot);
      job->fail(e.status(), e.what());
    } catch (const std::invalid_argument& e) {
      ++jobs_failed_;
      release(slot);
      job->fail(400, e.what());
    } catch (const std::exception& e) {
      ++jobs_failed_;
      release(slot);
      job->fail(500, e.what());
    }
  }
}

void Engine::release(Slot& slot) {
  slot.tokens = 0;
  slot.kv_bytes = 0;
  slot.kv_f16_bytes = 0;
  slot.kv_native_bytes = 0;
  slot.busy = false;
}

void Engine::run(Job& job, Slot& slot) {
  const lm::Model& model = *loaded_.model;
  lm::PromptCache state;
  int64_t cached = 0;
  if (std::optional<lm::PromptCache> reused = prefix_pool_.take(job.cache.key, job.prompt_tokens)) {
    state = std::move(*reused);
    cached = static_cast<int64_t>(state.tokens.size());
  } else {
    state.caches = std::move(job.fresh_caches);
  }
  job.fresh_caches.clear();
  const std::vector<int32_t> rest(job.prompt_tokens.begin() + cached, job.prompt_tokens.end());

  auto update_slot = [&](const lm::PromptCache& s) { record(slot, s); };
  StopMatcher matcher(job.stop);
  lm::GenerateOptions options = job.options;
  options.on_prompt_processed = update_slot;
  int64_t emitted = 0;
  const lm::GenerationStats stats = lm::stream_generate(
      model, *loaded_.tokenizer, rest, options,
      [&](const lm::GenerationChunk& chunk) {
        if (job.cancelled()) return false;
        std::string text = matcher.push(chunk.text);
        if (!text.empty()) job.push_text(std::move(text));
        ++emitted;
        record(slot, state);  // state.tokens lags by the token just sampled (fed next step)
        return !matcher.stopped();
      },
      &state);
  if (std::string tail = matcher.flush(); !tail.empty()) job.push_text(std::move(tail));

  JobResult result;
  result.prompt_tokens = static_cast<int64_t>(job.prompt_tokens.size());
  result.cached_tokens = cached;
  result.completion_tokens = stats.generation_tokens;
  result.kv_bytes = lm::kv_bytes_resident(state.caches);
  record(slot, state);
  result.kv_f16_bytes = slot.kv_f16_bytes;
  result.kv_native_bytes = slot.kv_native_bytes;
  result.prompt_tokens_per_s = stats.prompt_tokens_per_s;
  result.generation_tokens_per_s = stats.generation_tokens_per_s;
  switch (stats.stop_reason) {
    case lm::StopReason::kEos:
      result.finish_reason = "stop";
      break;
    case lm::StopReason::kMaxTokens:
    case lm::StopReason::kContextLimit:
      result.finish_reason = "length";
      break;
    case lm::StopReason::kCallback:
      result.finish_reason = matcher.stopped() ? "stop" : "cancelled";
      break;
  }
  prompt_tokens_total_ += static_cast<uint64_t>(result.prompt_tokens - cached);
  completion_tokens_total_ += static_cast<uint64_t>(result.completion_tokens);
  if (result.finish_reason == "cancelled") {
    ++jobs_cancelled_;
  } else {
    ++jobs_finished_;
  }
  // Hand the caches to the pool before the client hears "done", so a follow-up turn finds them.
  prefix_pool_.put(job.cache.key, std::move(state));
  release(slot);
  job.finish(std::move(result));
}

// The slot's live figures: resident bytes, and the two f16 references the CLI prints (bare
// rows; the host's own cache, which grows in kGrowthStep-token steps as the compressed ones do).
void Engine::record(Slot& slot, const lm::PromptCache& state) const {
  const auto tokens = static_cast<int64_t>(state.tokens.size());
  const int64_t step = lm::FullKVCache::kGrowthStep;
  slot.tokens = tokens;
  slot.kv_bytes = lm::kv_bytes_resident(state.caches);
  slot.kv_f16_bytes = full_precision_kv_bytes(*loaded_.model, tokens, lm::DType::F16);
  slot.kv_native_bytes = full_precision_kv_bytes(*loaded_.model, (tokens + step - 1) / step * step, lm::DType::F16);
}

EngineSnapshot Engine::snapshot() const {
  EngineSnapshot s;
  for (const auto& slot : slots_) {
    SlotSnapshot one;
    one.busy = slot->busy;
    one.tokens = slot->tokens;
    one.kv_bytes = slot->kv_bytes;
    one.kv_f16_bytes = slot->kv_f16_bytes;
    one.kv_native_bytes = slot->kv_native_bytes;
    {
      std::lock_guard<std::mutex> lock(slot->label_mutex);
      one.method = slot->method;
    }
    s.slots.push_back(std::move(one));
  }
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    s.queue_depth = queue_.size();
  }
  s.prompt_tokens_total = prompt_tokens_total_;
  s.completion_tokens_total = completion_tokens_total_;
  s.jobs_finished = jobs_finished_;
  s.jobs_cancelled = jobs_cancelled_;
  s.jobs_failed = jobs_failed_;
  s.prefix = prefix_pool_.counters();
  s.rss_bytes = lm::current_rss_bytes();
  return s;
}

}  // namespace apps::serve
