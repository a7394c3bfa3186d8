// The control socket's boundaries (vnic/control_limits.h): who may run what, the log's
// rate limit, chunked replies and their hostile variants; then the server itself at
// descriptor exhaustion and with a reply larger than one socket message.
#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "tests/vnic/temp_run_dir.h"
#include "vnic/control.h"
#include "vnic/control_limits.h"

using namespace rrdma;
using namespace rrdma::vnic;
using nlohmann::json;
using namespace std::chrono_literals;

TEST_CASE("refusal_for: root may do anything, a member only status and stats", "[vnic][control_limits]") {
  for (const char* cmd : {"status", "stats", "down", "capture", "trace", "anything"}) {
    CHECK_FALSE(refusal_for(cmd, 0));
  }
  CHECK_FALSE(refusal_for("status", 1000));
  CHECK_FALSE(refusal_for("stats", 1000));
  for (const char* cmd : {"down", "capture", "trace", "stop", "", "Status"}) {
    INFO(cmd);
    const auto refusal = refusal_for(cmd, 1000);
    REQUIRE(refusal);
    CHECK(refusal->rfind("only root may ", 0) == 0);
  }
  CHECK(refusal_for("down", 1000)->find("stop a vnic (down)") != std::string::npos);
  CHECK(refusal_for("capture", 1000)->find("capture") != std::string::npos);
  CHECK(refusal_for("trace", 4242)->find("uid 4242") != std::string::npos);
  // A long hostile command name is cut in the sentence.
  CHECK(refusal_for(std::string(5000, 'x'), 1000)->size() < 200);
}

TEST_CASE("refusal_for: the uid an ordinary user's daemon runs as may do what root may", "[vnic][control_limits][netdev]") {
  for (const char* cmd : {"status", "stats", "down", "capture", "trace"}) {
    CHECK_FALSE(refusal_for(cmd, 1000, 1000));
    CHECK_FALSE(refusal_for(cmd, 0, 1000));
  }
  const auto refusal = refusal_for("down", 1001, 1000);
  REQUIRE(refusal);
  CHECK(refusal->rfind("only root and uid 1000 (the vnic's owner) may stop a vnic (down)", 0) == 0);
}

TEST_CASE("log rate limiter: a burst, then a steady rate, and the next line tells what it held back",
          "[vnic][control_limits]") {
  LogRateLimiter limiter(/*burst=*/3, /*per_second=*/2);
  const Instant t0{};
  int logged = 0;
  for (int i = 0; i < 10; ++i) logged += limiter.admit(t0).log ? 1 : 0;
  CHECK(logged == 3);
  CHECK(limiter.suppressed_total() == 7);

  // Half a second buys one line, which reports the 7 held back.
  const auto first = limiter.admit(t0 + 500ms);
  CHECK(first.log);
  CHECK(first.suppressed_before == 7);
  CHECK_FALSE(limiter.admit(t0 + 500ms).log);
  // Time going backwards adds nothing.
  CHECK_FALSE(limiter.admit(t0 + 100ms).log);
  // A long quiet spell refills the bucket only up to the burst.
  int after_quiet = 0;
  for (int i = 0; i < 10; ++i) after_quiet += limiter.admit(t0 + 1h).log ? 1 : 0;
  CHECK(after_quiet == 3);
}

TEST_CASE("log rate limiter: 100000 lines in 10 s log at most burst + rate x 10", "[vnic][control_limits]") {
  LogRateLimiter limiter(20, 5);
  const Instant t0{};
  std::uint64_t logged = 0;
  for (int i = 0; i < 100000; ++i) {
    logged += limiter.admit(t0 + std::chrono::microseconds(i * 100)).log ? 1 : 0;
  }
  CHECK(logged <= 20 + 5 * 10 + 1);
  CHECK(logged >= 20 + 5 * 10 - 1);
  CHECK(logged + limiter.suppressed_total() == 100000);
}

TEST_CASE("split_reply: small replies are one message, large ones a header and bounded chunks",
          "[vnic][control_limits]") {
  const std::string small = json{{"ok", true}}.dump();
  const auto one = split_reply(small);
  REQUIRE(one.messages.size() == 1);
  CHECK(one.messages[0] == small);

  const std::string exactly = std::string(kMaxSingleReply, 'a');
  CHECK(split_reply(exactly).messages.size() == 1);

  const std::string large = json{{"blob", std::string(200000, 'q')}}.dump();
  const auto many = split_reply(large);
  const std::size_t chunks = (large.size() + kReplyChunkBytes - 1) / kReplyChunkBytes;
  REQUIRE(many.messages.size() == chunks + 1);
  const json header = json::parse(many.messages[0]);
  CHECK(header["chunked_reply"]["bytes"] == large.size());
  CHECK(header["chunked_reply"]["chunks"] == chunks);
  std::string joined;
  for (std::size_t i = 1; i < many.messages.size(); ++i) {
    CHECK(many.messages[i].size() <= kReplyChunkBytes);
    CHECK_FALSE(many.messages[i].empty());
    joined += many.messages[i];
  }
  CHECK(joined == large);

  CHECK(split_reply(std::string(kMaxReplyBytes + 1, 'z')).messages.empty());
}

TEST_CASE("reply assembler: whole and chunked replies round-trip", "[vnic][control_limits]") {
  for (std::size_t size : {std::size_t{10}, kMaxSingleReply - 20, kMaxSingleReply + 1, 3 * kReplyChunkBytes,
                           std::size_t{1000000}}) {
    INFO("size " << size);
    const json original{{"blob", std::string(size, 'r')}};
    ReplyAssembler assembler;
    const auto messages = split_reply(original.dump()).messages;
    for (std::size_t i = 0; i < messages.size(); ++i) {
      const auto step = assembler.feed(messages[i]);
      CHECK(step == (i + 1 == messages.size() ? ReplyAssembler::Step::Complete : ReplyAssembler::Step::NeedMore));
    }
    CHECK(assembler.reply() == original);
    // Nothing may follow the end.
    CHECK(assembler.feed("{}") == ReplyAssembler::Step::Failed);
  }
}

TEST_CASE("reply assembler: hostile headers and chunks fail, never buffer past the header's bound",
          "[vnic][control_limits]") {
  using Step = ReplyAssembler::Step;
  for (std::string_view bad : {"", "[1]", "not json", "\"text\"", R"({"chunked_reply":5})",
                               R"({"chunked_reply":{"bytes":0,"chunks":0}})",
                               R"({"chunked_reply":{"bytes":-5,"chunks":1}})",
                               R"({"chunked_reply":{"bytes":"100","chunks":1}})",
                               R"({"chunked_reply":{"bytes":100}})",
                               R"({"chunked_reply":{"bytes":100000,"chunks":1}})",
                               R"({"chunked_reply":{"bytes":100,"chunks":2}})",
                               R"({"chunked_reply":{"bytes":1e30,"chunks":1}})",
                               R"({"chunked_reply":{"bytes":67108865,"chunks":2049}})"}) {
    INFO("header " << bad);
    ReplyAssembler assembler;
    CHECK(assembler.feed(bad) == Step::Failed);
    CHECK_FALSE(assembler.error().empty());
  }
  const std::string header = R"({"chunked_reply":{"bytes":10,"chunks":1}})";
  {
    ReplyAssembler longer;  // a chunk longer than the header says
    REQUIRE(longer.feed(header) == Step::NeedMore);
    CHECK(longer.feed("{\"a\":12345678}") == Step::Failed);
  }
  {
    ReplyAssembler shorter;  // the chunks end short of the header's total
    REQUIRE(shorter.feed(header) == Step::NeedMore);
    CHECK(shorter.feed("{}") == Step::Failed);
  }
  {
    ReplyAssembler empty_chunk;
    REQUIRE(empty_chunk.feed(header) == Step::NeedMore);
    CHECK(empty_chunk.feed("") == Step::Failed);
  }
  {
    ReplyAssembler not_an_object;  // right size, not a JSON object
    REQUIRE(not_an_object.feed(header) == Step::NeedMore);
    CHECK(not_an_object.feed("[1,2,3,45]") == Step::Failed);
  }
  {
    ReplyAssembler oversized_chunk;  // over kReplyChunkBytes even if the total allowed it
    const std::string two = R"({"chunked_reply":{"bytes":65536,"chunks":2}})";
    REQUIRE(oversized_chunk.feed(two) == Step::NeedMore);
    CHECK(oversized_chunk.feed(std::string(kReplyChunkBytes + 1, ' ')) == Step::Failed);
  }
}

namespace {

std::size_t open_descriptors() {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++count;
  return count;
}

// A non-blocking connect, retried while the backlog is full, until `deadline`.
int connect_until(const std::filesystem::path& path, std::chrono::steady_clock::time_point deadline) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  while (std::chrono::steady_clock::now() < deadline) {
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) return fd;
    ::close(fd);
    if (errno != EAGAIN) return -1;
    std::this_thread::sleep_for(5ms);
  }
  return -1;
}

// One request and its (single-message) reply, or a discarded json, within `deadline`.
json ask(int fd, const std::string& request, std::chrono::steady_clock::time_point deadline) {
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) return json();
  pollfd entry{fd, POLLIN, 0};
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0 || ::poll(&entry, 1, static_cast<int>(left.count())) != 1) return json();
  char buffer[4096];
  const ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
  if (n <= 0) return json();
  return json::parse(std::string_view(buffer, static_cast<std::size_t>(n)), nullptr, false);
}

}  // namespace

// The daemon once treated EMFILE from accept() as "drained": the backlog stayed full, the
// listener's multishot poll never fired again, and every later command hung. Here a child
// process holds more connections than the server has descriptors; once it lets go, a new
// client must be answered.
TEST_CASE("control server: accepting survives descriptor exhaustion and resumes afterwards",
          "[vnic][control_limits]") {
  test::TempRunDir dir;
  const auto path = dir.path() / "rvx.sock";
  EventLoop loop(EventLoopConfig{});
  ControlServer server(path, loop, [&](const json& request, const PeerCredentials&) -> json {
    if (request["cmd"] == "down") loop.stop();
    return {{"ok", true}};
  });
  const auto give_up = std::chrono::steady_clock::now() + 20s;
  loop.add_timer_source([&](Instant now) -> std::optional<Instant> {
    if (now >= give_up) loop.stop();  // the assertions below then fail; never hang
    return give_up;
  });

  rlimit original{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &original) == 0);
  int hold[2], ready[2];
  REQUIRE(::pipe2(hold, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(ready, O_CLOEXEC) == 0);
  // Room for a dozen accepted connections; the child opens 64.
  rlimit tight = original;
  tight.rlim_cur = open_descriptors() + 12;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &tight) == 0);

  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(hold[1]);  // else our own copy would keep the pipe open for good
    ::close(ready[0]);
    ::setrlimit(RLIMIT_NOFILE, &original);
    const auto deadline = std::chrono::steady_clock::now() + 3s;
    int opened = 0;
    for (int i = 0; i < 64 && connect_until(path, deadline) >= 0; ++i) ++opened;
    const char done = static_cast<char>(opened);
    [[maybe_unused]] auto w = ::write(ready[1], &done, 1);
    char byte;
    [[maybe_unused]] auto r = ::read(hold[0], &byte, 1);  // until the parent closes its end
    ::_exit(0);
  }
  ::close(hold[0]);
  ::close(ready[1]);

  json reply;
  int child_opened = -1;
  std::thread driver([&] {
    char opened = 0;
    if (::read(ready[0], &opened, 1) == 1) child_opened = opened;
    ::close(hold[1]);  // the child exits: its connections close
    ::waitpid(child, nullptr, 0);
    // The flood is over: the limit goes back before this thread ends. Its std::thread state
    // is destroyed at the end under UBSan's vptr check, which tests that memory is readable
    // by writing it into a pipe; with no descriptor free for that pipe it reported a false
    // type error, now and then (seen in a fresh-clone run). What is tested is unchanged: the
    // listener that the exhaustion left with a full backlog must be accepting again.
    ::setrlimit(RLIMIT_NOFILE, &original);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    const int fd = connect_until(path, deadline);
    if (fd < 0) return;
    reply = ask(fd, R"({"cmd":"status"})", deadline);
    ask(fd, R"({"cmd":"down"})", deadline);
    ::close(fd);
  });
  loop.run();
  driver.join();
  ::close(ready[0]);
  ::setrlimit(RLIMIT_NOFILE, &original);

  CHECK(child_opened == 64);
  CHECK(reply == json{{"ok", true}});
  CHECK(server.counters().accept_fd_exhausted > 0);
  CHECK(server.counters().connections_shed > 0);
  CHECK(server.counters().connections_open <= 1);
}

TEST_CASE("control server: a reply of several hundred KB arrives whole through ControlClient",
          "[vnic][control_limits]") {
  test::TempRunDir dir;
  const auto path = dir.path() / "rvb.sock";
  EventLoop loop(EventLoopConfig{});
  const std::string blob(600000, 'b');  // larger than the default socket send buffer (212992)
  ControlServer server(path, loop, [&](const json& request, const PeerCredentials&) -> json {
    if (request["cmd"] == "down") {
      loop.stop();
      return {{"ok", true}};
    }
    return {{"blob", blob}};
  });
  json big, small;
  std::string error;
  std::thread client_thread([&] {
    auto client = ControlClient::connect(path, error);
    if (!client) return;
    big = client->request({{"cmd", "status"}}, 30s, error).value_or(json());
    // The connection still works after a chunked reply.
    small = client->request({{"cmd", "down"}}, 30s, error).value_or(json());
  });
  loop.run();
  client_thread.join();
  INFO(error);
  CHECK(big["blob"] == blob);
  CHECK(small == json{{"ok", true}});
  CHECK(server.counters().replies_chunked == 1);
  CHECK(server.counters().reply_send_errors == 0);
}
