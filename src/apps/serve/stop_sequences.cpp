#include "apps/serve/stop_sequences.h"

#include <algorithm>

namespace apps::serve {

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return {};
  pending_.append(text);
  // The earliest complete stop sequence wins.
  std::size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, pending_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop sequence.
  std::size_t hold = 0;
  for (const std::string& s : stops_) {
    for (std::size_t n = std::min(s.size() - 1, pending_.size()); n > hold; --n) {
      if (std::string_view(pending_).substr(pending_.size() - n) == std::string_view(s).substr(0, n)) {
        hold = n;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  if (!stopped_) out.swap(pending_);
  pending_.clear();
  return out;
}

}  // namespace apps::serve
