# Optional project include for the tsan preset when the whole veloxquant library does not fit:
#   cmake --preset tsan -DCMAKE_PROJECT_INCLUDE=cmake/tsan_attention_only.cmake
#   cmake --build build-tsan -j2 --target veloxquant_attention_driver_test
# veloxquant_lib then holds only src/veloxquant/attention/ (the split-K driver, the thread pool's
# one user there, and its kernels), enough for the tests of tests/veloxquant/attention/; the
# cache tests do not link against it. Highway targets and -g1 as in sanitize_quick.cmake.
include(${CMAKE_CURRENT_LIST_DIR}/sanitize_quick.cmake)
file(GLOB VQ_ATTENTION_ONLY_SOURCES ${CMAKE_SOURCE_DIR}/src/veloxquant/attention/*.cpp)
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL set_property TARGET veloxquant_lib PROPERTY SOURCES
               ${VQ_ATTENTION_ONLY_SOURCES})
