# Optional project include for the tsan preset: the caches that encode rows or attend on the
# global thread pool, under ThreadSanitizer, without the whole veloxquant library (over an hour of
# both cores on a 2-core machine; this one builds in about 10 minutes there):
#   cmake --preset tsan -DCMAKE_PROJECT_INCLUDE=$PWD/cmake/tsan_pooled_caches.cmake
#   nice -n 10 cmake --build build-tsan -j2 --target veloxquant_gear_cache_test ...
#   TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 build-tsan/tests/veloxquant_gear_cache_test
# or in one command: bash scripts/test.sh --sanitize thread --include cmake/tsan_pooled_caches.cmake
# --targets REGEX (the executables that link here and that command: docs/reliability.md,
# "Sanitizer builds"). veloxquant_lib then holds every quantization cache with fused attention:
# turboquant_rvq, kivi, kivi_sink, kvquant,
# gear, skvq, nsnquant, adakv, a2ats, turboquant_block (the q8/q5/q4/q3 presets), cachegen,
# zipcache, svdq, amc, anchorkv, age_tiered, comm_vq, vecinfer, palu, kitty and kvtc, with what
# they link: the attention/, core/, quant/ and rows/ sources they call, the config, presets,
# builder and registry, whose table is cmake/tsan_pooled_caches_method_table.cpp (those 21 rows)
# instead of registry/method_table.cpp (every method: it would link the eviction and cross-layer
# families too, i.e. the whole library). A test of an eviction or cross-layer cache, or one that
# needs every method (method_registry, contract_serving_cache, fused_decode_allocations' sweep),
# does not link or does not pass here. The list is the smallest that links these tests (found
# from the objects' undefined symbols, then the link errors): when a cache gains a dependency,
# the link error names the source to add. Highway targets and -g1 as in sanitize_quick.cmake.
include(${CMAKE_CURRENT_LIST_DIR}/sanitize_quick.cmake)
set(VQ_POOLED_CACHES_SOURCES
    allocators/bit_allocation
    attention/affine_part_planes attention/affine_part_rows attention/affine_value_sums
    attention/affine_word_rows attention/attention_driver attention/bit_field_rows
    attention/block_level_key_scores attention/block_level_value_sums
    attention/byte_level_key_scores attention/code_row_scores attention/code_rows
    attention/codebook_key_scores attention/codeword_rows attention/codeword_sum_rows
    attention/decoded_run_rows attention/dense_level_rows attention/dtype_rows
    attention/even_byte_key_scores attention/f16_dots attention/float_key_scores
    attention/fused_call attention/integer_key_scores attention/latent_pair_tiles attention/latent_tiles attention/level_lookup
    attention/mask_split_queries attention/narrow_plane_scores attention/softmax_mass
    attention/split_level_key_scores attention/split_level_rows attention/tile_kernels
    attention/word_code_rows attention/word_plane_scores
    builder/kv_cache_builder
    caches/a2ats_cache caches/a2ats_row_scan caches/a2ats_rows caches/adakv_cache caches/adakv_rows
    caches/age_tier caches/age_tier_rows caches/age_tiered_cache caches/amc_cache
    caches/amc_latent_columns caches/amc_rows caches/amc_tiers caches/anchorkv_cache
    caches/anchorkv_records caches/anchorkv_residuals caches/anchorkv_rows caches/block_svd caches/cachegen_cache caches/cachegen_rows
    caches/comm_vq_cache caches/dense_and_sparse_rows caches/fitted_levels caches/gear_block_set caches/gear_cache
    caches/group_affine_rows caches/kaq_mass caches/kitty_cache caches/kitty_rows caches/kivi_cache
    caches/kivi_row_source caches/kivi_sink_cache caches/kvquant_cache caches/kvtc_cache
    caches/latent_cache caches/latent_rows caches/low_rank_rows caches/nsnquant_cache
    caches/nsnquant_rows caches/palu_cache caches/product_vq caches/product_vq_lut
    caches/product_vq_rows caches/quantized_blocks_tail caches/sink_rows caches/skvq_cache
    caches/skvq_clip_search caches/skvq_codes caches/skvq_rows caches/sparse_outliers
    caches/svdq_basis caches/svdq_cache caches/svdq_latent_decode caches/svdq_latent_scores caches/svdq_layout
    caches/svdq_projection caches/svdq_rows caches/top_mass_rows caches/turboquant_block_cache
    caches/turboquant_block_method caches/turboquant_block_rows caches/turboquant_block_split_keys
    caches/turboquant_block_split_rows caches/turboquant_rvq_cache caches/turboquant_rvq_method
    caches/turboquant_rvq_row_source caches/vecinfer_cache caches/window_call_rows
    caches/zipcache_cache
    config/bit_width config/config_validation config/field_spec config/kv_cache_config
    config/per_layer_lists
    core/bit_packing core/column_distances core/group_quant core/hadamard core/kmeans core/linalg
    core/lloyd_max core/rans_coder core/rng core/rotation core/simd_kernels core/simd_kernels_scalar
    cross_layer/xkv_rows
    eviction/codec_tiles eviction/row_codec
    integration/prompt_cache_types
    presets/kv_presets
    quant/block_lloyd_quant quant/boundary_counts quant/code_io quant/log8_scale
    quant/nearest_codeword quant/nsn_codebook quant/nsn_transform quant/quantizer_checks
    quant/scale_trials quant/turboquant_rvq
    registry/field_assignment registry/method_registry
    rows/cache_rows rows/group_affine_codes)
list(TRANSFORM VQ_POOLED_CACHES_SOURCES PREPEND ${CMAKE_SOURCE_DIR}/src/veloxquant/)
list(TRANSFORM VQ_POOLED_CACHES_SOURCES APPEND .cpp)
list(APPEND VQ_POOLED_CACHES_SOURCES ${CMAKE_CURRENT_LIST_DIR}/tsan_pooled_caches_method_table.cpp)
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL set_property TARGET veloxquant_lib PROPERTY SOURCES
               ${VQ_POOLED_CACHES_SOURCES})
