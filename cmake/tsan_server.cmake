# Optional project include for the tsan preset: `veloxquant serve` (several requests decoding at
# once on one model, the shared pool and the prefix pool) and the integration tests outside
# cross_layer/ under ThreadSanitizer, without the whole veloxquant library (over an hour of both
# cores on a 2-core machine). The companion of cmake/tsan_pooled_caches.cmake and
# cmake/tsan_eviction_caches.cmake:
#   cmake --preset tsan -DCMAKE_PROJECT_INCLUDE=$PWD/cmake/tsan_server.cmake
#   nice -n 10 cmake --build build-tsan -j2 --target veloxquant_cli apps_serve_http_test \
#     apps_serve_load_test apps_serve_request_test apps_serve_stop_test \
#     veloxquant_integration_stories_test
#   TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/support/tsan.supp \
#     build-tsan/tests/apps_serve_load_test
# or in one command (it builds veloxquant_cli with the apps_ tests and sets TSAN_OPTIONS so):
#   bash scripts/test.sh --sanitize thread --include cmake/tsan_server.cmake \
#     --targets 'apps_serve_(http|load|request|stop)_test'
# The serve tests start build-tsan/veloxquant, the TSan CLI, as a child process that inherits
# TSAN_OPTIONS; tests/support/server_process.h fails the test when the server's stderr holds a
# sanitizer report. The suppressions file is needed there: without it, concurrent first requests
# get two false reports inside Debian's uninstrumented libcpp-httplib (tests/support/tsan.supp).
# veloxquant_lib then holds the caches those runs ask for: kivi, turboquant_block (the
# q8/q5/q4/q3 presets), turboquant_rvq and the 16 eviction methods (h2o among them; their
# registration is one unit), with what they link (attention/, core/, quant/, rows/, config,
# presets, builder, registry, integration/patch_model and patch_vlm), 101 sources and a method
# table, cmake/tsan_server_method_table.cpp (those 19 rows), instead of
# registry/method_table.cpp (every method: the whole library). The `veloxquant` CLI holds only
# `serve` and `generate` (the serve tests compare the two) and the files they include: the other
# subcommands link eval/ and every method. Fails by construction here: serve_http's
# BadRequestsGetClearErrorsAndTheServerKeepsServing expects turboquant_prod's "standalone"
# refusal (this table does not name the standalone quantizers: "unknown method"); tests that walk
# every servable method walk these 19. The list is the transitive closure of the undefined
# symbols of vq_serve's, the CLI's, these tests' objects and the table's rows over
# veloxquant_lib's objects (nm over a Release build), checked by linking: when a cache gains a
# dependency, the link error names the source to add. Switching build-tsan/ between this include
# and another recompiles all of veloxquant_lib (about 9 minutes at -j2 here). Highway targets
# and -g1 as in sanitize_quick.cmake (an AVX-512 machine runs the AVX2 kernels).
include(${CMAKE_CURRENT_LIST_DIR}/sanitize_quick.cmake)
set(VQ_SERVER_SOURCES
    attention/affine_value_sums attention/affine_word_rows attention/attention_driver
    attention/block_level_key_scores attention/block_level_value_sums
    attention/byte_level_key_scores attention/code_rows attention/codebook_key_scores
    attention/dense_level_rows attention/dtype_rows attention/even_byte_key_scores
    attention/float_key_scores attention/fused_call attention/integer_key_scores
    attention/level_lookup attention/row_ranges_source attention/split_level_key_scores
    attention/split_level_rows attention/tile_kernels attention/word_code_rows
    attention/word_plane_scores builder/kv_cache_builder caches/dense_and_sparse_rows
    caches/fitted_levels caches/group_affine_rows caches/kivi_cache caches/kivi_row_source
    caches/sink_rows caches/sparse_outliers caches/turboquant_block_cache
    caches/turboquant_block_method caches/turboquant_block_rows caches/turboquant_block_split_keys
    caches/turboquant_block_split_rows caches/turboquant_rvq_cache caches/turboquant_rvq_method
    caches/turboquant_rvq_row_source config/bit_width config/config_validation config/field_spec
    config/per_layer_lists core/bit_packing core/group_quant core/hadamard core/lloyd_max core/rng
    core/rotation core/simd_kernels core/simd_kernels_scalar eviction/anchor_scores
    eviction/attention_scores eviction/eviction_cache eviction/eviction_config
    eviction/eviction_mask eviction/eviction_policy eviction/eviction_registration eviction/eviction_row_source eviction/codec_tiles
    eviction/eviction_rows eviction/first_minimum eviction/leverage_kernels eviction/leverage_scores
    eviction/methods/cam_cache eviction/methods/chunkkv_cache eviction/methods/curdkv_cache
    eviction/methods/h2o_cache eviction/methods/keyformer_cache eviction/methods/knorm_cache
    eviction/methods/kvzip_cache eviction/methods/morphkv_cache eviction/methods/nestedkv_cache
    eviction/methods/pyramidkv_cache eviction/methods/qfilters_cache eviction/methods/rocketkv_cache
    eviction/methods/snapkv_cache eviction/methods/squeeze_cache
    eviction/methods/streaming_llm_cache eviction/methods/tova_cache eviction/ordered_sums
    eviction/page_summaries eviction/pyramid_schedule eviction/recent_votes eviction/row_codec eviction/row_logits
    eviction/squeeze_schedule eviction/tridiagonal_bisection eviction/tridiagonal_inverse_iteration eviction/upper_gram
    integration/patch_model integration/patch_vlm
    integration/prompt_cache_types presets/kv_presets quant/block_lloyd_quant quant/boundary_counts
    quant/code_io quant/log8_scale quant/quantizer_checks quant/scale_trials
    quant/turboquant_rvq registry/eviction_method_rows registry/field_assignment
    registry/method_registry rows/cache_rows rows/group_affine_codes)
list(TRANSFORM VQ_SERVER_SOURCES PREPEND ${CMAKE_SOURCE_DIR}/src/veloxquant/)
list(TRANSFORM VQ_SERVER_SOURCES APPEND .cpp)
list(APPEND VQ_SERVER_SOURCES ${CMAKE_CURRENT_LIST_DIR}/tsan_server_method_table.cpp)
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL set_property TARGET veloxquant_lib PROPERTY SOURCES
               ${VQ_SERVER_SOURCES})
set(VQ_SERVER_CLI_SOURCES main serve_command generate_command image_generation model_loading int_flag progress_bar)
list(TRANSFORM VQ_SERVER_CLI_SOURCES PREPEND ${CMAKE_SOURCE_DIR}/src/apps/)
list(TRANSFORM VQ_SERVER_CLI_SOURCES APPEND .cpp)
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL set_property TARGET veloxquant_cli PROPERTY SOURCES
               ${VQ_SERVER_CLI_SOURCES})
