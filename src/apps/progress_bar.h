#pragma once
// A one-line progress bar for long prefills, redrawn in place on stderr. It draws only when
// enabled (the CLI enables it when stderr is a terminal), so piped or logged stderr keeps
// exactly one stats line.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace apps {

// "prefill [##########..........]  512/1024 tok  1234 tok/s" for a bar `width` cells wide.
std::string render_progress(const std::string& label, int64_t done, int64_t total, int width, double seconds);

// True when `stream` is attached to a terminal.
bool is_terminal(std::FILE* stream);

class ProgressBar {
 public:
  ProgressBar(std::FILE* out, std::string label, bool enabled);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(int64_t done, int64_t total);
  // Erases the bar (so the text that follows starts on a clean line).
  void finish();

 private:
  std::FILE* out_;
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace apps
