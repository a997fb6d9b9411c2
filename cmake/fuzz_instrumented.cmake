# The instrumented build of scripts/fuzz.sh (build-fuzz-lib/), loaded as CMAKE_PROJECT_INCLUDE.
#
# The whole project is compiled with clang and -fsanitize=fuzzer-no-link,address (CMAKE_CXX_FLAGS,
# set by the script), so base and lm — every loader and parser the fuzz targets drive — carry
# libFuzzer's coverage counters and AddressSanitizer's checks. Only fuzz_field_assignment needs
# the veloxquant library, and only for its settings code: config/ and registry/ (the --set parser,
# the field table, validation, the method rows). The registry rows name every method's cache, so
# the link needs the whole library, but instrumenting the method kernels buys nothing (no fuzz
# input reaches them) and costs a lot: clang spent over 15 minutes and 3.4 GB on
# attention/block_level_key_scores.cpp alone at -O1 with the instrumentation (2026-12-05, shared
# 2 cores). So every veloxquant source outside config/ and registry/ is compiled plainly at -O0.
function(vq_fuzz_plain_method_sources)
  get_target_property(dir veloxquant_lib SOURCE_DIR)
  foreach(target veloxquant_lib vq_eval)
    get_target_property(sources ${target} SOURCES)
    foreach(source IN LISTS sources)
      if(NOT source MATCHES "/(config|registry)/")
        # APPEND: some sources already carry options of their own (-ffp-contract=off, Eigen's
        # -isystem). Source options come after CMAKE_CXX_FLAGS, so these win.
        set_property(SOURCE ${source} DIRECTORY ${dir} APPEND PROPERTY COMPILE_OPTIONS
                     -O0 -fno-sanitize=fuzzer-no-link,address)
        # The AVX3_DL kernels call VNNI / VBMI intrinsics inside lambdas. GCC compiles a lambda
        # with its enclosing function's target attribute; clang does not, and refuses
        # (byte_level_key_scores.cpp: "_mm512_dpbusd_epi32 requires target feature
        # 'avx512vnni'"). This build only links them (fuzz_field_assignment never runs a kernel)
        # and runs on the machine that built it, so those files get this machine's features.
        file(STRINGS ${source} wants_avx3_dl REGEX "define HWY_WANT_AVX3_DL")
        if(wants_avx3_dl)
          set_property(SOURCE ${source} DIRECTORY ${dir} APPEND PROPERTY COMPILE_OPTIONS -march=native)
        endif()
      endif()
    endforeach()
  endforeach()
endfunction()
# Deferred to the end of the top-level directory, when src/veloxquant has defined its targets.
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL vq_fuzz_plain_method_sources)
