#pragma once
// The serving core of `veloxquant serve`, independent of HTTP: one loaded model, N slots (one
// worker thread each) that run lm::stream_generate over per-request caches, a FIFO queue for
// requests beyond the slots, the prefix pool, and the live figures /metrics reports.
//
// A request becomes a Job: its prompt tokens, generation options, stop sequences and cache
// choice go in; text pieces, then one Done (or Error) event come out through the job's
// channel, which the HTTP thread drains. Cancelling a job (the client went away) makes the
// slot's token callback return false, so the slot frees at the next token.
//
// Slots decode concurrently but each runs its own forward (the host's forward is one sequence
// per call); lm's thread pool runs one parallel loop at a time and concurrent callers run
// their loops inline, so slots share the cores without interfering.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "apps/kv_method_flags.h"
#include "apps/serve/prefix_cache_pool.h"
#include "lm/generate.h"
#include "lm/load.h"
#include "veloxquant/config/kv_cache_config.h"

namespace apps::serve {

struct ServeOptions {
  int parallel = 1;              // slots
  int64_t context_length = 0;    // longest sequence per request; 0 = the model's
  std::size_t max_queue = 1024;  // waiting requests beyond the slots; more get 503
  std::size_t prompt_cache_entries = 16;
  std::size_t prompt_cache_bytes = std::size_t{256} << 20;
  int prefill_step = 512;
};

// A request's cache, resolved and validated against the model.
struct CacheSelection {
  std::optional<veloxquant::KVCacheConfig> config;  // nullopt = the host's native cache
  std::string label;                                // "none", "kivi", "preset q4: turboquant_block"
  std::string bits;                                 // as given ("4" or "2,3,4"); "" = the method's default (or none)
  std::string settings;                             // the preset's and --set assignments, "preset=q4,key_bits=5,..."

  std::string key;  // identifies the configuration in the prefix pool
};

struct JobResult {
  std::string finish_reason;        // "stop", "length", "cancelled"
  int64_t prompt_tokens = 0;        // the whole prompt
  int64_t cached_tokens = 0;        // of which restored from the prefix pool
  int64_t completion_tokens = 0;    // tokens sampled (a stop token included)
  std::size_t kv_bytes = 0;         // caches' nbytes() at the end
  std::size_t kv_f16_bytes = 0;     // the same tokens as bare f16 rows
  std::size_t kv_native_bytes = 0;  // what the host's f16 cache would allocate for them
  double prompt_tokens_per_s = 0;
  double generation_tokens_per_s = 0;
};

struct JobEvent {
  enum class Kind { kText, kDone, kError, kTimeout };
  Kind kind = Kind::kTimeout;
  std::string text;  // kText; the message for kError
  int status = 500;  // kError: the HTTP status
  JobResult result;  // kDone
};

class Job {
 public:
  std::vector<int32_t> prompt_tokens;
  lm::GenerateOptions options;
  std::vector<std::string> stop;
  CacheSelection cache;
  lm::CacheList fresh_caches;  // built when the request was admitted (validates the config)

  // Consumer side: the next event, or kTimeout after `wait`.
  JobEvent next(std::chrono::milliseconds wait);
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  bool started() const { return started_; }

  // Producer side (the slot).
  void push_text(std::string text);
  void finish(JobResult result);
  void fail(int status, std::string message);
  void mark_started() { started_ = true; }

 private:
  void push(JobEvent event);
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<JobEvent> events_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> started_{false};
};

struct SlotSnapshot {
  bool busy = false;
  std::string method;
  int64_t tokens = 0;               // tokens in its caches
  std::size_t kv_bytes = 0;         // resident now
  std::size_t kv_f16_bytes = 0;     // the same tokens as bare f16 rows
  std::size_t kv_native_bytes = 0;  // what the host's f16 cache would allocate for them
};

struct EngineSnapshot {
  std::vector<SlotSnapshot> slots;
  std::size_t queue_depth = 0;
  uint64_t prompt_tokens_total = 0;
  uint64_t completion_tokens_total = 0;
  uint64_t jobs_finished = 0;
  uint64_t jobs_cancelled = 0;
  uint64_t jobs_failed = 0;
  PrefixCacheCounters prefix;
  std::size_t rss_bytes = 0;
};

class Engine {
 public:
  Engine(lm::LoadedModel loaded, ServeOptions options, KvMethodFlags default_cache);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const lm::Model& model() const { return *loaded_.model; }
  const lm::Tokenizer& tokenizer() const { return *loaded_.tokenizer; }
  const ServeOptions& options() const { return options_; }
  int64_t context_length() const { return context_length_; }
  const CacheSelection& default_cache() const { return default_cache_; }

  // The request's `veloxquant` field (or the server's cache when nullopt), validated like the
  // CLI's flags; throws ApiError(400) naming the problem.
  CacheSelection resolve_cache(const std::optional<KvMethodFlags>& choice) const;
  // Fresh caches for a selection (for_model or the native ones); throws ApiError(400) when the
  // configuration does not fit this model (e.g. a bit-width list of the wrong length).
  lm::CacheList make_caches(const CacheSelection& selection) const;

  // Queues a job (throws ApiError(503) when the queue is full, 400 for a bad job).
  void submit(const std::shared_ptr<Job>& job);

  EngineSnapshot snapshot() const;

 private:
  struct Slot {
    std::atomic<bool> busy{false};
    std::atomic<int64_t> tokens{0};
    std::atomic<std::size_t> kv_bytes{0};
    std::atomic<std::size_t> kv_f16_bytes{0};
    std::atomic<std::size_t> kv_native_bytes{0};
    mutable std::mutex label_mutex;
    std::string method;
  };
  void worker(int slot_index);
  void record(Slot& slot, const lm::PromptCache& state) const;
  static void release(Slot& slot);
  void run(Job& job, Slot& slot);

  lm::LoadedModel loaded_;
  ServeOptions options_;
  int64_t context_length_ = 0;
  CacheSelection default_cache_;
  PrefixCachePool prefix_pool_;

  mutable std::mutex queue_mutex_;
  std::condition_variable queue_ready_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;

  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> prompt_tokens_total_{0};
  std::atomic<uint64_t> completion_tokens_total_{0};
  std::atomic<uint64_t> jobs_finished_{0};
  std::atomic<uint64_t> jobs_cancelled_{0};
  std::atomic<uint64_t> jobs_failed_{0};
};

}  // namespace apps::serve
