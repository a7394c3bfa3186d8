#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "tests/vnic/temp_run_dir.h"
#include "vnic/control.h"

using namespace rrdma;
using namespace rrdma::vnic;
using nlohmann::json;

namespace {

json echo_cmd(const json& request, const PeerCredentials& peer) {
  if (request["cmd"] == "boom") throw std::runtime_error("it broke");
  return {{"cmd", request["cmd"]}, {"uid", peer.uid}};
}

}  // namespace

TEST_CASE("answer: hostile requests get an error object, never reach the handler", "[vnic][control]") {
  bool called = false;
  const RequestHandler spy = [&](const json&, const PeerCredentials&) {
    called = true;
    return json::object();
  };
  const PeerCredentials peer;
  for (std::string_view bad : {"", "{", "[1,2]", "\"status\"", "{}", "{\"cmd\": 5}", "{\"cmd\": null}",
                               "{\"command\": \"status\"}", "\xff\xfe"}) {
    INFO("request '" << bad << "'");
    const json reply = answer(bad, peer, spy);
    CHECK(reply.is_object());
    CHECK(reply.contains("error"));
    CHECK(reply["error"].is_string());
  }
  CHECK_FALSE(called);
}

TEST_CASE("answer: good requests reach the handler and its exceptions become errors", "[vnic][control]") {
  PeerCredentials peer;
  peer.uid = 1000;
  CHECK(answer(R"({"cmd":"status"})", peer, echo_cmd) == json{{"cmd", "status"}, {"uid", 1000}});
  CHECK(answer(R"({"cmd":"boom"})", peer, echo_cmd) == json{{"error", "it broke"}});
}

TEST_CASE("control server and client over a real socket, served by the event loop", "[vnic][control]") {
  test::TempRunDir dir;
  const auto path = dir.path() / "rv0.sock";
  EventLoop loop(EventLoopConfig{});
  ControlServer server(path, loop, [&](const json& request, const PeerCredentials& peer) -> json {
    if (request["cmd"] == "big") return {{"blob", std::string(100000, 'x')}};
    if (request["cmd"] == "down") {
      loop.stop();
      return {{"ok", true}};
    }
    return echo_cmd(request, peer);
  });
  CHECK((std::filesystem::status(path).permissions() & std::filesystem::perms::all) ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
         std::filesystem::perms::group_read | std::filesystem::perms::group_write));

  json status_reply, bad_reply, big_reply, down_reply;
  std::string error;
  std::thread client_thread([&] {
    auto client = ControlClient::connect(path, error);
    if (!client) return;
    status_reply = client->request({{"cmd", "status"}}, std::chrono::seconds(30), error).value_or(json());
    bad_reply = client->request({{"cmd", "boom"}}, std::chrono::seconds(30), error).value_or(json());
    big_reply = client->request({{"cmd", "big"}}, std::chrono::seconds(30), error).value_or(json());
    down_reply = client->request({{"cmd", "down"}}, std::chrono::seconds(30), error).value_or(json());
  });
  loop.run();
  client_thread.join();
  INFO(error);
  CHECK(status_reply == json{{"cmd", "status"}, {"uid", ::getuid()}});
  CHECK(bad_reply == json{{"error", "it broke"}});
  CHECK(big_reply["blob"] == std::string(100000, 'x'));  // larger than any request may be
  CHECK(down_reply == json{{"ok", true}});
  CHECK(server.requests() == 4);
}

TEST_CASE("control client: nothing listening is a clean error", "[vnic][control]") {
  test::TempRunDir dir;
  std::string error;
  CHECK_FALSE(ControlClient::connect(dir.path() / "nobody.sock", error));
  CHECK_FALSE(error.empty());
}

TEST_CASE("control server: verbs frames reach the verbs hooks with their fds and a bad frame ends the client",
          "[vnic][control]") {
  namespace vc = verbs::control;
  test::TempRunDir dir;
  const auto path = dir.path() / "rv1.sock";
  EventLoop loop(EventLoopConfig{});
  std::vector<std::uint64_t> connected, disconnected;
  std::vector<std::size_t> fds_seen;
  VerbsHooks hooks;
  hooks.connected = [&](std::uint64_t client, const PeerCredentials& peer) {
    connected.push_back(client);
    CHECK(peer.pid == ::getpid());
  };
  hooks.disconnected = [&](std::uint64_t client) {
    disconnected.push_back(client);
    loop.stop();
  };
  hooks.request = [&](std::uint64_t, const vc::Message& request, vc::ReceivedFds& fds) {
    fds_seen.push_back(fds.size());
    vc::Message reply = vc::make_reply(request.type(), request.request_id, 0);
    reply.words[vc::field::kContextHandle] = 77;
    return reply;
  };
  ControlServer server(path, loop, echo_cmd, std::move(hooks));

  json admin_reply;
  vc::Message verbs_reply;
  bool closed_after_garbage = false;
  std::thread client_thread([&] {
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) return;
    const std::string text = R"({"cmd":"status"})";
    ::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
    char buffer[512] = {};
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    admin_reply = json::parse(std::string_view(buffer, n > 0 ? static_cast<std::size_t>(n) : 0), nullptr, false);
    // open_device carries three fds (the hooks here do not look at them).
    const int fds[3] = {::eventfd(0, EFD_CLOEXEC), ::eventfd(0, EFD_CLOEXEC), ::eventfd(0, EFD_CLOEXEC)};
    vc::send_message(fd, vc::make_request(vc::MessageType::OpenDevice, 9), fds);
    for (const int sent : fds) ::close(sent);
    vc::Received received;
    do {
      received = vc::receive_message(fd);
    } while (received.error == vc::IoError::WouldBlock);
    verbs_reply = received.message;
    const std::uint8_t garbage[20] = {0x89, 'R', 'V', 'C', 0, 1, 0, 1};
    ::send(fd, garbage, sizeof(garbage), MSG_NOSIGNAL);
    closed_after_garbage = ::recv(fd, buffer, sizeof(buffer), 0) == 0;
    ::close(fd);
  });
  loop.run();
  client_thread.join();
  CHECK(admin_reply == json{{"cmd", "status"}, {"uid", ::getuid()}});
  CHECK(verbs_reply.wire_type == vc::reply_type(vc::MessageType::OpenDevice));
  CHECK(verbs_reply.request_id == 9);
  CHECK(verbs_reply.words.at(vc::field::kContextHandle) == 77);
  CHECK(fds_seen == std::vector<std::size_t>{3});
  CHECK(closed_after_garbage);
  REQUIRE(connected.size() == 1);
  CHECK(disconnected == connected);
  CHECK(server.counters().verbs_requests == 1);
  CHECK(server.counters().verbs_bad_frames == 1);
  CHECK(server.counters().admin_requests == 1);
}

namespace {

// A raw connection to the control socket, as a hostile member would hold it.
int connect_raw(const std::filesystem::path& path) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

// Issue 27 item 10: a channel made of any descriptor a member sent (O_PATH: the daemon spun on
// a poll that failed with EBADF; an eventfd: never EOF) is no longer possible: a CreateChannel
// request carrying a descriptor ends the connection, and the channel's descriptor is the one
// the daemon sends back.
TEST_CASE("control server: an rdma_cm channel is the daemon's socketpair, never a descriptor the client sends",
          "[vnic][control][ucma]") {
  namespace ucma = verbs::ucma;
  test::TempRunDir dir;
  const auto path = dir.path() / "rv_ucma.sock";
  EventLoop loop(EventLoopConfig{});
  ControlServer server(path, loop, [&](const json& request, const PeerCredentials&) -> json {
    if (request["cmd"] == "down") loop.stop();
    return {{"ok", true}};
  });
  int handled = 0;
  server.set_ucma_handler([&](const PeerCredentials&, const ucma::Frame& request, verbs::control::ReceivedFds& fds) {
    ++handled;
    CHECK(fds.size() == 0);
    int ends[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends) == 0);
    ::close(ends[0]);
    fds.add(ends[1]);
    return ucma::Frame{.kind = request.kind, .reply = true, .request_id = request.request_id, .channel = 42, .body = {}};
  });
  bool hostile_dropped = false, got_socket = false;
  std::thread client([&] {
    const ucma::Frame create{.kind = ucma::Kind::CreateChannel, .request_id = 1, .body = {}};
    for (const int flags : {O_PATH, O_RDONLY}) {
      const int sent = ::open("/", flags | O_CLOEXEC);
      const int fd = connect_raw(path);
      if (fd < 0 || sent < 0) return;
      ucma::send_frame(fd, create, sent);
      const ucma::Received answer = ucma::receive_frame(fd);
      hostile_dropped = answer.error == verbs::control::IoError::PeerClosed;
      ::close(sent);
      ::close(fd);
      if (!hostile_dropped) break;
    }
    const int fd = connect_raw(path);
    if (fd < 0) return;
    ucma::send_frame(fd, create);
    const ucma::Received answer = ucma::receive_frame(fd);
    if (answer.error == verbs::control::IoError::None && answer.fds.size() == 1) {
      struct stat st {};
      got_socket = ::fstat(answer.fds.at(0), &st) == 0 && S_ISSOCK(st.st_mode) && answer.frame.channel == 42;
    }
    std::string error;
    if (auto admin = ControlClient::connect(path, error)) admin->request({{"cmd", "down"}}, std::chrono::seconds(30), error);
    ::close(fd);
  });
  loop.run();
  client.join();
  CHECK(hostile_dropped);
  CHECK(got_socket);
  CHECK(handled == 1);
}

// Issue 27 item 7: a member that never read its replies kept a large reply queued in the
// kernel per connection (the send buffer is raised to hold a chunked reply whole). Now one
// connection holds at most 128 KiB of unread replies when it asks again (then it ends), and a uid's connections
// together leave at most unread_reply_bytes_per_uid unread: a large reply past it is an error.
TEST_CASE("control server: replies left unread are bounded per connection and per uid", "[vnic][control]") {
  test::TempRunDir dir;
  const auto path = dir.path() / "rv_unread.sock";
  EventLoop loop(EventLoopConfig{});
  ControlServerLimits limits;
  limits.unread_reply_bytes_per_uid = 300 * 1024;
  ControlServer server(
      path, loop,
      [&](const json& request, const PeerCredentials&) -> json {
        if (request["cmd"] == "down") loop.stop();
        if (request["cmd"] == "big") return {{"blob", std::string(200 * 1024, 'x')}};
        return {{"ok", true}};
      },
      std::nullopt, std::nullopt, limits);
  const std::string big = R"({"cmd":"big"})";
  bool second_refused = false, first_dropped = false;
  std::thread client([&] {
    const int first = connect_raw(path), second = connect_raw(path);
    if (first >= 0 && second >= 0) {
      ::send(first, big.data(), big.size(), MSG_NOSIGNAL);
      pollfd ready{first, POLLIN, 0};
      ::poll(&ready, 1, 30000);  // its reply is queued, and stays unread
      ::send(second, big.data(), big.size(), MSG_NOSIGNAL);
      std::vector<char> buffer(kMaxControlMessage);
      const ssize_t n = ::recv(second, buffer.data(), buffer.size(), 0);
      second_refused = n > 0 && n < 4096 && std::string_view(buffer.data(), static_cast<std::size_t>(n)).find("unread") != std::string_view::npos;
      // Asking again on the first without reading: the daemon hangs up. Nothing is read
      // meanwhile (reading would make room, and race the daemon's look).
      ::send(first, big.data(), big.size(), MSG_NOSIGNAL);
      pollfd hangup{first, POLLRDHUP, 0};
      first_dropped = ::poll(&hangup, 1, 10000) == 1 && (hangup.revents & (POLLHUP | POLLRDHUP)) != 0;
    }
    std::string error;
    if (auto admin = ControlClient::connect(path, error)) admin->request({{"cmd", "down"}}, std::chrono::seconds(30), error);
    if (first >= 0) ::close(first);
    if (second >= 0) ::close(second);
  });
  loop.run();
  client.join();
  CHECK(second_refused);
  CHECK(first_dropped);
  CHECK(server.counters().replies_refused_unread == 1);
  CHECK(server.counters().dropped_unread_replies == 1);
}
