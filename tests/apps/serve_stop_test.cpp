// OpenAiServer::stop() in-process, on a loopback port. `veloxquant serve`'s signal waiter calls
// it every 10 ms until it takes and never again: httplib's stop() does nothing before listen()
// has started its loop, and a second one while listen() drains its pool fails httplib's
// assert(svr_sock_ != INVALID_SOCKET) wherever asserts are compiled in (a header-only httplib in a
// build without NDEBUG aborted 5 of 6 SIGTERM runs that way; docs/reliability.md).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "apps/kv_method_flags.h"
#include "apps/serve/generation_engine.h"
#include "apps/serve/openai_server.h"
#include "lm/load.h"

namespace {

using apps::serve::Engine;
using apps::serve::HttpOptions;
using apps::serve::OpenAiServer;

TEST(ServeStop, TakesOnceListenHasStartedAndListenThenReturns) {
  Engine engine(lm::load(std::string(VQ_SHARED_DIR) + "/models/stories260K/stories260K.gguf"),
                apps::serve::ServeOptions{}, apps::KvMethodFlags{});
  HttpOptions http;
  http.port = 0;
  OpenAiServer server(engine, http);
  ASSERT_GT(server.bind(), 0);
  EXPECT_FALSE(server.stop()) << "bound but not listening: there is no loop to stop yet";

  std::thread listener([&server] { server.listen(); });
  bool took = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!took && std::chrono::steady_clock::now() < deadline) {
    took = server.stop();
    if (!took) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  listener.join();  // hangs here (the test's timeout) if the stop that reported success did not end the loop
  EXPECT_TRUE(took) << "stop() never took within 60 s of listen()";
  EXPECT_FALSE(server.stop()) << "listen() has returned: nothing is running";
}

}  // namespace
