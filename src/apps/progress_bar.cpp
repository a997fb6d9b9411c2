#include "apps/progress_bar.h"

#include <unistd.h>

#include <algorithm>

namespace apps {

std::string render_progress(const std::string& label, int64_t done, int64_t total, int width, double seconds) {
  const int64_t clamped = std::clamp<int64_t>(done, 0, std::max<int64_t>(total, 0));
  const int filled = total > 0 ? static_cast<int>(clamped * width / total) : width;
  std::string bar = label + " [";
  bar.append(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(width - filled), '.');
  bar += "] " + std::to_string(clamped) + "/" + std::to_string(total) + " tok";
  if (seconds > 0 && clamped > 0) {
    char rate[32];
    std::snprintf(rate, sizeof rate, "  %.0f tok/s", static_cast<double>(clamped) / seconds);
    bar += rate;
  }
  return bar;
}

bool is_terminal(std::FILE* stream) { return stream != nullptr && ::isatty(::fileno(stream)) == 1; }

ProgressBar::ProgressBar(std::FILE* out, std::string label, bool enabled)
    : out_(out), label_(std::move(label)), enabled_(enabled), start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(int64_t done, int64_t total) {
  if (!enabled_) return;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // \r + erase-line keeps the bar on one line however its length changes.
  std::fprintf(out_, "\r\033[2K%s", render_progress(label_, done, total, 30, seconds).c_str());
  std::fflush(out_);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (!drawn_) return;
  std::fprintf(out_, "\r\033[2K");
  std::fflush(out_);
  drawn_ = false;
}

}  // namespace apps
