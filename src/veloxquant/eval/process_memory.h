#pragma once
// Resident memory of this process, read from the kernel (Linux /proc), not estimated.
#include <cstdint>
#include <optional>

namespace veloxquant::eval {

// Peak resident set size (VmHWM) in bytes since start or since the last reset; falls back to
// getrusage's ru_maxrss where /proc is unavailable.
int64_t peak_rss_bytes();

// Current resident set size (VmRSS) in bytes; nullopt where /proc is unavailable.
std::optional<int64_t> current_rss_bytes();

// Resets the peak to the current RSS (writes "5" to /proc/self/clear_refs, Linux >= 4.0), so
// that a following measurement belongs to the work done after the reset. Returns false
// where the kernel does not allow it; the peak then stays process-wide.
bool reset_peak_rss();

}  // namespace veloxquant::eval
