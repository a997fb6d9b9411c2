# Optional project include for the tsan preset: the caches that encode rows on the global thread
# pool, under ThreadSanitizer, without the whole veloxquant library (over an hour of both cores
# on a 2-core machine; this one builds in about 5 minutes there):
#   cmake --preset tsan -DCMAKE_PROJECT_INCLUDE=cmake/tsan_pooled_caches.cmake
#   nice -n 10 cmake --build build-tsan -j2 --target veloxquant_gear_cache_test ...
#   TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 build-tsan/tests/veloxquant_gear_cache_test
# or in one command: bash scripts/test.sh --sanitize thread --include cmake/tsan_pooled_caches.cmake
# --targets REGEX. The executables that link here: docs/reliability.md, "Sanitizer builds".
# veloxquant_lib then holds KIVI, kivi_sink, kvquant, gear, skvq, nsnquant, adakv, a2ats and
# turboquant_block (the q8/q5/q4/q3 presets) with what they link: the attention/, core/, quant/
# and rows/ sources they call, the config, presets, builder and registry, whose table is
# cmake/tsan_pooled_caches_method_table.cpp (those nine rows) instead of
# registry/method_table.cpp (every cache: it would link the whole library). Each of these caches
# runs its fused attention through the split-K driver on the global pool, and all but adakv also
# encode rows on it. A test of another cache, or one that lists every method (method_registry,
# contract_serving_cache, fused_decode_allocations' sweep), does not link or does not pass here.
# The list is the smallest that links these tests (found from each object's undefined symbols):
# when a cache gains a dependency, the link error names the source to add. Highway targets and
# -g1 as in sanitize_quick.cmake.
include(${CMAKE_CURRENT_LIST_DIR}/sanitize_quick.cmake)
set(VQ_POOLED_CACHES_SOURCES
    attention/affine_value_sums attention/affine_word_rows attention/attention_driver
    attention/block_level_key_scores attention/block_level_value_sums
    attention/byte_level_key_scores attention/code_rows attention/codebook_key_scores
    attention/codeword_sum_rows attention/dense_level_rows attention/dtype_rows
    attention/even_byte_key_scores attention/f16_dots attention/float_key_scores
    attention/fused_call attention/integer_key_scores attention/level_lookup attention/softmax_mass
    attention/split_level_key_scores attention/split_level_rows attention/tile_kernels
    attention/word_code_rows attention/word_plane_scores
    builder/kv_cache_builder
    caches/a2ats_cache caches/a2ats_row_scan caches/a2ats_rows caches/adakv_cache caches/adakv_rows
    caches/block_svd caches/dense_and_sparse_rows caches/fitted_levels caches/gear_cache
    caches/group_affine_rows caches/kaq_mass caches/kivi_cache caches/kivi_row_source
    caches/kivi_sink_cache caches/kvquant_cache caches/low_rank_rows caches/nsnquant_cache
    caches/nsnquant_rows caches/quantized_blocks_tail caches/sink_rows caches/skvq_cache
    caches/skvq_clip_search caches/skvq_codes caches/skvq_rows caches/sparse_outliers
    caches/top_mass_rows caches/turboquant_block_cache caches/turboquant_block_method
    caches/turboquant_block_rows caches/turboquant_block_split_keys
    caches/turboquant_block_split_rows caches/window_call_rows
    config/bit_width config/config_validation config/field_spec config/kv_cache_config
    config/per_layer_lists
    core/bit_packing core/column_distances core/group_quant core/hadamard core/kmeans core/linalg
    core/rng core/rotation core/simd_kernels core/simd_kernels_scalar
    integration/prompt_cache_types
    presets/kv_presets
    quant/block_lloyd_quant quant/boundary_counts quant/log8_scale quant/nearest_codeword
    quant/nsn_codebook quant/nsn_transform quant/scale_trials
    registry/field_assignment registry/method_registry
    rows/cache_rows rows/group_affine_codes)
list(TRANSFORM VQ_POOLED_CACHES_SOURCES PREPEND ${CMAKE_SOURCE_DIR}/src/veloxquant/)
list(TRANSFORM VQ_POOLED_CACHES_SOURCES APPEND .cpp)
list(APPEND VQ_POOLED_CACHES_SOURCES ${CMAKE_CURRENT_LIST_DIR}/tsan_pooled_caches_method_table.cpp)
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL set_property TARGET veloxquant_lib PROPERTY SOURCES
               ${VQ_POOLED_CACHES_SOURCES})
