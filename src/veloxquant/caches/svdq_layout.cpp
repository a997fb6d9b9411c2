#include "veloxquant/caches/svdq_layout.h"

#include <sstream>

#include "veloxquant/core/bit_packing.h"
#include "veloxquant/errors.h"

namespace veloxquant {

namespace {

// The error for one bad schedule entry, built outside parse_svdq_schedule's loop.
[[noreturn]] void throw_bad_schedule_entry(const std::string& text, const std::string& item) {
  throw QuantizerConfigError("svdq_bit_schedule must be 8 comma-separated widths in [0, 8], got '" + text +
                             "' (bad entry '" + item + "')");
}

}  // namespace

std::vector<int> parse_svdq_schedule(const std::string& text) {
  std::vector<int> widths;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    int bits = -1;
    try {
      bits = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    while (used < item.size() && item[used] == ' ') ++used;
    if (used == 0 || used != item.size() || bits < 0 || bits > 8) throw_bad_schedule_entry(text, item);
    widths.push_back(bits);
  }
  if (widths.size() != 8) {
    throw QuantizerConfigError("svdq_bit_schedule must be 8 comma-separated widths in [0, 8], got '" + text + "' (" +
                               std::to_string(widths.size()) + " entries)");
  }
  bool any = false;
  for (int b : widths) any = any || b > 0;
  if (!any) throw QuantizerConfigError("svdq_bit_schedule drops every group ('" + text + "'): nothing would be kept");
  return widths;
}

SvdqLayout make_svdq_layout(int64_t dim, const std::vector<int>& schedule) {
  SvdqLayout layout;
  layout.dim = dim;
  for (int g = 0; g < 8; ++g) {
    // Channels c with floor(8c / D) == g: [ceil(g D / 8), ceil((g + 1) D / 8)).
    const int64_t begin = (g * dim + 7) / 8, end = ((g + 1) * dim + 7) / 8;
    const int bits = schedule[static_cast<std::size_t>(g)];
    if (bits == 0 || end <= begin) continue;
    SvdqGroup group;
    group.first = layout.coded;
    group.channels = end - begin;
    group.bits = bits;
    group.byte_offset = layout.row_bytes;
    for (int64_t c = begin; c < end; ++c) layout.latent_of.push_back(c);
    layout.coded += group.channels;
    layout.row_bytes += static_cast<int64_t>(core::dense_bytes(static_cast<std::size_t>(group.channels), bits));
    layout.groups.push_back(group);
  }
  return layout;
}

void pack_svdq_row(const SvdqLayout& layout, const uint8_t* codes, uint8_t* row) {
  for (const SvdqGroup& g : layout.groups) {
    core::pack_dense(codes + g.first, static_cast<std::size_t>(g.channels), g.bits, row + g.byte_offset);
  }
}

void unpack_svdq_row(const SvdqLayout& layout, const uint8_t* row, uint8_t* codes) {
  for (const SvdqGroup& g : layout.groups) {
    core::unpack_dense(row + g.byte_offset, static_cast<std::size_t>(g.channels), g.bits, codes + g.first);
  }
}

}  // namespace veloxquant
