/* LD_PRELOAD shim for the sanitizer runs: std::thread::hardware_concurrency() (libstdc++ calls
   get_nprocs) returns POOL_THREADS (default 4), so base::ThreadPool's global pool, sized by it,
   has that many participants on a machine with fewer cores. TSan then sees more threads touch
   each pooled loop's data than the 2-core machine's default pool of 2 gives:
     gcc -shared -fPIC -O1 tools/pool_threads_preload.c -o /tmp/libpool_threads.so
     POOL_THREADS=4 LD_PRELOAD=/tmp/libpool_threads.so build-tsan/tests/veloxquant_gear_cache_test
   Tests that size their own pools (set_global_threads(n > 0)) are unaffected. */
#include <stdlib.h>

int get_nprocs(void) {
  const char* threads = getenv("POOL_THREADS");
  const int n = threads ? atoi(threads) : 4;
  return n > 0 ? n : 1;
}
