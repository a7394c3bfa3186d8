#include <catch2/catch.hpp>

#include <thread>

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
