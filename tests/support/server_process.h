#pragma once
// Starts `veloxquant serve` as a child process on a free loopback port (--port 0; the port is
// read from the VELOXQUANT_READY line on its stdout) and talks HTTP/1.1 to it over plain
// sockets, so the tests see exactly what a client sees: status lines, chunked transfer, SSE.
// Header-only; needs VQ_BINARY_DIR.
//
// The server's stderr goes to a temporary file that the destructor deletes, so a sanitizer report
// printed by the child (a sanitized build's `veloxquant serve`: a data race between two slots, a
// heap error in a handler) would vanish with it while the HTTP answers still look right. The
// destructor fails the running test with the report instead.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace test_support {

class ServerProcess {
 public:
  // `args` follow `veloxquant serve` (--port 0 is added).
  explicit ServerProcess(const std::vector<std::string>& args, int ready_timeout_s = 120) {
    const std::string binary = std::string(VQ_BINARY_DIR) + "/veloxquant";
    stderr_path_ = (std::filesystem::temp_directory_path() /
                    ("vq_serve_err_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++)))
                       .string();
    int out[2];
    if (::pipe(out) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      const int err = ::open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (err >= 0) ::dup2(err, STDERR_FILENO);
      ::close(out[0]);
      std::vector<std::string> all = {binary, "serve", "--port", "0"};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(binary.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    stdout_fd_ = out[0];
    // Read stdout until the ready line (or EOF / timeout).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(ready_timeout_s);
    std::string text;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{stdout_fd_, POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      char buffer[4096];
      const ssize_t n = ::read(stdout_fd_, buffer, sizeof(buffer));
      if (n <= 0) break;
      text.append(buffer, static_cast<std::size_t>(n));
      const std::size_t at = text.find("VELOXQUANT_READY ");
      const std::size_t end = at == std::string::npos ? at : text.find('\n', at);
      if (end != std::string::npos) {
        ready_ = nlohmann::json::parse(text.substr(at + 17, end - at - 17));
        port_ = ready_.at("port").get<int>();
        break;
      }
    }
  }
  ~ServerProcess() {
    stop();
    const std::string report = sanitizer_report(stderr_text());
    if (!report.empty()) ADD_FAILURE() << "the server printed a sanitizer report:\n" << report;
    std::filesystem::remove(stderr_path_);
  }
  // From the first sanitizer report in `err` (ThreadSanitizer, AddressSanitizer, LeakSanitizer,
  // UndefinedBehaviorSanitizer's "runtime error:") to the end; "" when there is none.
  static std::string sanitizer_report(const std::string& err) {
    std::size_t at = std::string::npos;
    for (const char* mark : {"WARNING: ThreadSanitizer", "ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                             "ThreadSanitizer: ", ": runtime error: "}) {
      at = std::min(at, err.find(mark));
    }
    if (at == std::string::npos) return "";
    const std::size_t line = err.rfind('\n', at);
    return err.substr(line == std::string::npos ? 0 : line + 1);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool ready() const { return port_ > 0; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const nlohmann::json& ready_info() const { return ready_; }
  std::string stderr_text() const {
    std::ifstream in(stderr_path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // Still running (not exited, not killed)?
  bool alive() {
    if (pid_ <= 0) return false;
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == 0) return true;
    exit_status_ = status;
    pid_ = -1;
    return false;
  }
  // SIGTERM, then wait; returns the wait status (-1 if it was not running).
  int stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      for (int i = 0; i < 100; ++i) {
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          exit_status_ = status;
          break;
        }
        ::usleep(50000);
      }
      if (pid_ > 0) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        pid_ = -1;
        exit_status_ = -2;  // did not stop on SIGTERM
      }
    }
    if (stdout_fd_ >= 0) ::close(stdout_fd_);
    stdout_fd_ = -1;
    return exit_status_;
  }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int port_ = 0;
  int exit_status_ = -1;
  nlohmann::json ready_;
  std::string stderr_path_;
};

// A connected loopback socket (-1 on failure), with receive/send timeouts.
inline int connect_loopback(int port, int timeout_s = 60) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, const std::string& data) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

struct HttpResponse {
  int status = 0;  // 0: no (or no parsable) answer
  std::string headers;
  std::string body;  // de-chunked
};

inline std::string dechunk(const std::string& raw) {
  std::string out;
  std::size_t at = 0;
  while (at < raw.size()) {
    const std::size_t line_end = raw.find("\r\n", at);
    if (line_end == std::string::npos) break;
    const std::size_t size = std::stoul(raw.substr(at, line_end - at), nullptr, 16);
    if (size == 0) break;
    out += raw.substr(line_end + 2, size);
    at = line_end + 2 + size + 2;
  }
  return out;
}

inline HttpResponse parse_response(const std::string& raw) {
  HttpResponse r;
  const std::size_t head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || head_end == std::string::npos) return r;
  r.status = std::stoi(raw.substr(9, 3));
  r.headers = raw.substr(0, head_end);
  const std::string body = raw.substr(head_end + 4);
  std::string lower = r.headers;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  r.body = lower.find("transfer-encoding: chunked") != std::string::npos ? dechunk(body) : body;
  return r;
}

// One request on its own connection (Connection: close), read to the end.
inline HttpResponse http_request(int port, const std::string& method, const std::string& path,
                                 const std::string& body = "", const std::string& extra_headers = "",
                                 int timeout_s = 120) {
  const int fd = connect_loopback(port, timeout_s);
  if (fd < 0) return {};
  std::string request = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra_headers;
  if (method == "POST") {
    request += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  request += "\r\n" + body;
  std::string raw;
  if (send_all(fd, request)) {
    char buffer[16384];
    for (;;) {
      const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      raw.append(buffer, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  return parse_response(raw);
}

// The JSON payloads of a server-sent-event body ("data: {...}" lines; [DONE] kept as a string).
inline std::vector<nlohmann::json> sse_events(const std::string& body) {
  std::vector<nlohmann::json> events;
  std::size_t at = 0;
  while (at < body.size()) {
    std::size_t end = body.find("\n\n", at);
    if (end == std::string::npos) end = body.size();
    const std::string block = body.substr(at, end - at);
    if (block.rfind("data: ", 0) == 0) {
      const std::string data = block.substr(6);
      events.push_back(data == "[DONE]" ? nlohmann::json("[DONE]") : nlohmann::json::parse(data));
    }
    at = end + 2;
  }
  return events;
}

// One value out of Prometheus text ("name" or "name{labels}"); -1 when absent.
inline double metric_value(const std::string& text, const std::string& series) {
  std::size_t at = 0;
  while ((at = text.find(series + " ", at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') return std::stod(text.substr(at + series.size() + 1));
    at += series.size();
  }
  return -1;
}

}  // namespace test_support
