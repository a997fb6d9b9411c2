#pragma once
// The object every layer cache of one for_model call shares (spec §4.3; issues #79/#80 of the
// original): a leader layer publishes what its followers need for the tokens of one call, a
// follower fetches it for the same tokens. Segments are keyed by (group_id, token_start) and
// carry a reader count; each fetch decrements it and the last read deletes the segment and
// credits its tokens back to the group's live count. max_ctx bounds the live (published, not
// yet fully read) tokens per group; exceeding it is a CrossLayerCapacityError naming the option
// to raise. Generation is sequential, so there is no locking (as the original).
//
// Payloads are immutable and shared: a follower may keep the shared_ptr after the segment is
// gone (xquant's reuse layers keep the anchor's codes this way, so they are held once).
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace veloxquant::cross_layer {

class CrossLayerCapacityError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws CrossLayerCapacityError: "<option>: group G would hold N live tokens ... Increase <option>".
[[noreturn]] void throw_capacity_exceeded(const std::string& max_ctx_option, int group_id, int64_t live,
                                          int64_t max_ctx);

template <class Payload>
class SegmentCoordinator {
 public:
  // max_ctx_option: the config field that sets max_ctx (named in the error).
  SegmentCoordinator(int64_t max_ctx, std::string max_ctx_option)
      : max_ctx_(max_ctx), option_(std::move(max_ctx_option)) {}

  // n_readers <= 0 publishes nothing: no one would ever read (and free) it.
  void publish(int group_id, int64_t token_start, int64_t rows, int n_readers, std::shared_ptr<const Payload> payload) {
    if (n_readers <= 0) return;
    const Key key{group_id, token_start};
    int64_t live = live_[group_id];
    if (const auto it = segments_.find(key); it != segments_.end())
      live -= it->second.rows;  // re-published (after a trim)
    if (live + rows > max_ctx_) throw_capacity_exceeded(option_, group_id, live + rows, max_ctx_);
    segments_[key] = Segment{std::move(payload), rows, n_readers};
    live_[group_id] = live + rows;
  }

  // The payload published for (group_id, token_start), or null when none is (the caller
  // handles it: not yet published, or a follower restored without its leader).
  std::shared_ptr<const Payload> fetch(int group_id, int64_t token_start) {
    const auto it = segments_.find(Key{group_id, token_start});
    if (it == segments_.end()) return nullptr;
    std::shared_ptr<const Payload> payload = it->second.payload;
    if (--it->second.reads_remaining <= 0) {
      live_[group_id] -= it->second.rows;
      segments_.erase(it);
    }
    return payload;
  }

  int64_t live_tokens(int group_id) const {
    const auto it = live_.find(group_id);
    return it == live_.end() ? 0 : it->second;
  }
  std::size_t live_segments() const { return segments_.size(); }
  int64_t max_ctx() const { return max_ctx_; }

  // Forgets every segment (between generations; make_cache normally builds a fresh one).
  void reset() {
    segments_.clear();
    live_.clear();
  }

 private:
  using Key = std::pair<int, int64_t>;
  struct Segment {
    std::shared_ptr<const Payload> payload;
    int64_t rows = 0;
    int reads_remaining = 0;
  };
  int64_t max_ctx_;
  std::string option_;
  std::map<Key, Segment> segments_;
  std::map<int, int64_t> live_;
};

}  // namespace veloxquant::cross_layer
