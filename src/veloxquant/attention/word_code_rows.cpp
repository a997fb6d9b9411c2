// Highway kernel for word_code_rows.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/word_code_rows.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/word_code_rows.h"

#include <vector>

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void UnpackWordRowsImpl(const uint32_t* first_row, int64_t row_stride_words, int64_t n_rows, int64_t n, int bits,
                        const float* levels, float* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int per = 32 / bits;
  const int n_levels = 1 << bits;
  // Each code's word and shift (n entries), rebuilt only when the row shape changes: a cache
  // calls this twice per tile with its key and value shapes, so per thread two tables suffice.
  struct Table {
    int bits = 0;
    int64_t n = -1;
    std::vector<int32_t> word, shift;
  };
  thread_local Table tables[2];
  thread_local int next = 0;
  Table* table_for = nullptr;
  for (Table& t : tables) {
    if (t.bits == bits && t.n == n) table_for = &t;
  }
  if (table_for == nullptr) {
    table_for = &tables[next];
    next ^= 1;
    table_for->bits = bits;
    table_for->n = n;
    table_for->word.resize(static_cast<std::size_t>(n));
    table_for->shift.resize(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      table_for->word[static_cast<std::size_t>(i)] = static_cast<int32_t>(i / per);
      table_for->shift[static_cast<std::size_t>(i)] = static_cast<int32_t>(bits * (i % per));
    }
  }
  // Local pointers: the stores to `out` would otherwise make the compiler reload the vectors'
  // data pointers every chunk.
  const int32_t* word = table_for->word.data();
  const int32_t* shift = table_for->shift.data();
  const auto mask = hn::Set(di, n_levels - 1);
  const bool in_register = levels != nullptr && n_levels <= lanes;
  HWY_ALIGN float table[hn::MaxLanes(df)];
  for (int64_t k = 0; k < lanes; ++k) table[k] = in_register ? levels[k < n_levels ? k : n_levels - 1] : 0.0f;
  const auto t = hn::Load(df, table);
  const int64_t whole = n - n % lanes;
  const int64_t row_words = (n + per - 1) / per;
  if (lanes == 8 && row_words <= 8 && (levels == nullptr || in_register)) {
    // A row's words fit one vector (3-bit codes at head_dim 64: 7 words): loaded once (masked,
    // nothing past the row is read), each chunk's words picked by an in-register permute
    // instead of a gather from memory — the gathers were most of kvquant's decode.
    const auto row_mask = hn::FirstN(di, static_cast<std::size_t>(row_words));
    for (int64_t j = 0; j < n_rows; ++j) {
      const auto* row = reinterpret_cast<const int32_t*>(first_row + j * row_stride_words);
      const auto words = hn::MaskedLoad(row_mask, di, row);
      float* o = out + j * n;
      for (int64_t i = 0; i < whole; i += lanes) {
        const auto w = hn::TableLookupLanes(words, hn::IndicesFromVec(di, hn::LoadU(di, word + i)));
        const auto code = hn::And(hn::Shr(w, hn::LoadU(di, shift + i)), mask);
        if (levels == nullptr) {
          hn::StoreU(hn::ConvertTo(df, code), df, o + i);
        } else {
          hn::StoreU(hn::TableLookupLanes(t, hn::IndicesFromVec(df, code)), df, o + i);
        }
      }
      for (int64_t i = whole; i < n; ++i) {
        const int c =
            static_cast<int>((static_cast<uint32_t>(row[word[i]]) >> shift[i]) & static_cast<uint32_t>(n_levels - 1));
        o[i] = levels == nullptr ? static_cast<float>(c) : levels[c];
      }
    }
    return;
  }
  for (int64_t j = 0; j < n_rows; ++j) {
    const auto* row = reinterpret_cast<const int32_t*>(first_row + j * row_stride_words);
    float* o = out + j * n;
    for (int64_t i = 0; i < whole; i += lanes) {
      const auto w = hn::GatherIndex(di, row, hn::LoadU(di, word + i));
      const auto code = hn::And(hn::Shr(w, hn::LoadU(di, shift + i)), mask);
      if (levels == nullptr) {
        hn::StoreU(hn::ConvertTo(df, code), df, o + i);
      } else if (in_register) {
        hn::StoreU(hn::TableLookupLanes(t, hn::IndicesFromVec(df, code)), df, o + i);
      } else {
        hn::StoreU(hn::GatherIndex(df, levels, code), df, o + i);
      }
    }
    for (int64_t i = whole; i < n; ++i) {
      const int c =
          static_cast<int>((static_cast<uint32_t>(row[word[i]]) >> shift[i]) & static_cast<uint32_t>(n_levels - 1));
      o[i] = levels == nullptr ? static_cast<float>(c) : levels[c];
    }
  }
}

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(UnpackWordRowsImpl);

void unpack_word_rows(const uint32_t* first_row, int64_t row_stride_words, int64_t n_rows, int64_t n, int bits,
                      const float* levels, float* out) {
  HWY_DYNAMIC_DISPATCH(UnpackWordRowsImpl)(first_row, row_stride_words, n_rows, n, bits, levels, out);
}

namespace scalar {
void unpack_word_rows(const uint32_t* first_row, int64_t row_stride_words, int64_t n_rows, int64_t n, int bits,
                      const float* levels, float* out) {
  const int64_t per = 32 / bits;
  const uint32_t mask = (1u << bits) - 1u;
  for (int64_t j = 0; j < n_rows; ++j) {
    const uint32_t* row = first_row + j * row_stride_words;
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t c = (row[i / per] >> (bits * (i % per))) & mask;
      out[j * n + i] = levels == nullptr ? static_cast<float>(c) : levels[c];
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif
