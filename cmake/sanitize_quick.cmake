# Optional project include for the sanitizer presets on a small machine:
#   cmake --preset asan -DCMAKE_PROJECT_INCLUDE=cmake/sanitize_quick.cmake
# veloxquant_lib's Highway kernels (22 files) are otherwise compiled for five x86 targets, of
# which an AVX2 machine runs one; here only AVX2 and the EMU128 fallback are compiled, with line
# tables (-g1) instead of full debug info. Reports keep their file:line. What runs on an AVX2
# machine is unchanged; an AVX-512 machine would run the AVX2 path instead of AVX3 (use the plain
# preset there). vq_base and lm keep every target: their tests compare each target to scalar.
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL set_property TARGET veloxquant_lib APPEND PROPERTY
               COMPILE_DEFINITIONS "HWY_DISABLED_TARGETS=(HWY_SSSE3|HWY_SSE4|HWY_AVX3|HWY_AVX3_DL)")
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL set_property TARGET veloxquant_lib APPEND PROPERTY
               COMPILE_OPTIONS "-g1")
