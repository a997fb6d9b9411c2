# Optional project include for the tsan preset: the eviction and cross-layer caches under
# ThreadSanitizer, without the whole veloxquant library (over an hour of both cores on a 2-core
# machine). The companion of cmake/tsan_pooled_caches.cmake (the 21 quantization caches):
#   cmake --preset tsan -DCMAKE_PROJECT_INCLUDE=$PWD/cmake/tsan_eviction_caches.cmake
#   nice -n 19 cmake --build build-tsan -j2 --target veloxquant_eviction_fused_test ...
#   TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 build-tsan/tests/veloxquant_eviction_fused_test
# or in one command: bash scripts/test.sh --sanitize thread --include cmake/tsan_eviction_caches.cmake
# --targets REGEX (the executables that link here and that command: docs/reliability.md,
# "Sanitizer builds"). veloxquant_lib then holds every source of eviction/ (the 16 eviction
# methods: snapkv, streaming_llm, h2o, tova, pyramidkv, knorm, keyformer, kvzip, cam, morphkv,
# chunkkv, qfilters, squeeze, curdkv, nestedkv, rocketkv, with their scores, masks, row codecs and
# fused path) and of cross_layer/ (minicache, xkv, xquant and their coordinators), with what they
# link: the attention/, core/, quant/ and rows/ sources they call (KIVI-style group codes and
# TurboQuant-RVQ for the evicted rows' storage, svdq's layout for the row codec), the config,
# presets, builder, registry and method report, integration/patch_model (the model tests), and
# spectral's standalone cache (a rules test builds one). Its method table is
# cmake/tsan_eviction_caches_method_table.cpp: the 16 eviction rows and the 3 cross-layer rows,
# instead of registry/method_table.cpp (it names every quantizer too). The tests that walk the
# registry link here and walk these 19: contract_serving_cache (339 tests) and concurrent_caches
# pass whole; method_registry's and method_coverage's assertions about named quantizers,
# integration_stories (turboquant_rvq) and fused_decode_allocations' WarmSteps test (kivi) and its
# sweep's count (>= 30 fused caches; 18 here) fail by construction (docs/reliability.md, the fifth
# TSan run, lists them; they pass against the whole library). kv_cache_builder_test and a
# quantization cache's own test do not link. The list is the transitive closure of the undefined
# symbols of eviction/, cross_layer/, the registry and builder objects and these tests' objects
# (nm over a Release build's objects), checked by linking: when a cache gains a dependency, the
# link error names the source to add. Switching build-tsan/ between this include and another
# recompiles all of veloxquant_lib. Highway targets and -g1 as in sanitize_quick.cmake.
include(${CMAKE_CURRENT_LIST_DIR}/sanitize_quick.cmake)
set(VQ_EVICTION_CACHES_SOURCES
    attention/affine_word_rows attention/attention_driver attention/code_rows attention/dtype_rows
    attention/float_key_scores attention/fused_call attention/integer_key_scores
    attention/narrow_plane_scores attention/row_ranges_source attention/tile_kernels
    builder/kv_cache_builder caches/quantized_blocks_tail caches/spectral_cache
    caches/standalone_cache_base caches/svdq_latent_decode caches/svdq_latent_scores
    caches/svdq_layout caches/svdq_rows config/bit_width config/config_validation config/field_spec
    config/kv_cache_config config/per_layer_lists core/bit_packing core/group_quant core/hadamard
    core/linalg core/lloyd_max core/rng core/rotation core/simd_kernels core/simd_kernels_scalar
    cross_layer/layer_roles cross_layer/minicache_cache cross_layer/segment_coordinator
    cross_layer/slerp_merge cross_layer/token_group_quant cross_layer/wiring_registry
    cross_layer/xkv_basis cross_layer/xkv_cache cross_layer/xkv_coordinator cross_layer/xkv_rows
    cross_layer/xquant_cache cross_layer/xquant_rows eviction/anchor_scores
    eviction/attention_scores eviction/codec_tiles eviction/eviction_cache eviction/eviction_config
    eviction/eviction_mask eviction/eviction_policy eviction/eviction_registration
    eviction/eviction_row_source eviction/eviction_rows eviction/first_minimum eviction/leverage_kernels
    eviction/leverage_scores eviction/methods/cam_cache eviction/methods/chunkkv_cache
    eviction/methods/curdkv_cache eviction/methods/h2o_cache eviction/methods/keyformer_cache
    eviction/methods/knorm_cache eviction/methods/kvzip_cache eviction/methods/morphkv_cache
    eviction/methods/nestedkv_cache eviction/methods/pyramidkv_cache eviction/methods/qfilters_cache
    eviction/methods/rocketkv_cache eviction/methods/snapkv_cache eviction/methods/squeeze_cache
    eviction/methods/streaming_llm_cache eviction/methods/tova_cache eviction/ordered_sums
    eviction/page_summaries eviction/pyramid_schedule eviction/recent_votes eviction/row_codec eviction/row_logits
    eviction/squeeze_schedule eviction/tridiagonal_bisection eviction/tridiagonal_inverse_iteration eviction/upper_gram
    integration/patch_model
    integration/prompt_cache_types presets/kv_presets quant/code_io quant/quantizer_checks
    quant/turboquant_rvq registry/cross_layer_method_rows registry/eviction_method_rows
    registry/field_assignment registry/method_registry registry/method_report rows/cache_rows
    rows/group_affine_codes)
list(TRANSFORM VQ_EVICTION_CACHES_SOURCES PREPEND ${CMAKE_SOURCE_DIR}/src/veloxquant/)
list(TRANSFORM VQ_EVICTION_CACHES_SOURCES APPEND .cpp)
list(APPEND VQ_EVICTION_CACHES_SOURCES ${CMAKE_CURRENT_LIST_DIR}/tsan_eviction_caches_method_table.cpp)
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL set_property TARGET veloxquant_lib PROPERTY SOURCES
               ${VQ_EVICTION_CACHES_SOURCES})
