// The vnic-free parts of the verbs system-test program: if the pattern check could miss a
// moved or wrong byte, or the splitter lost a byte, every verbs_*.sh result would be void.
#include "tests/system/verbs_peer_support.h"

#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <numeric>
#include <set>
#include <thread>

using namespace rrdma::systest;
using namespace std::chrono_literals;

namespace {

std::variant<Options, std::string> parse(std::initializer_list<std::string_view> args) {
  const std::vector<std::string_view> v(args);
  return parse_options(v);
}

std::string error_of(std::initializer_list<std::string_view> args) {
  auto result = parse(args);
  REQUIRE(std::holds_alternative<std::string>(result));
  return std::get<std::string>(result);
}

}  // namespace

TEST_CASE("pattern: fill and check agree at every offset, and any one changed byte is found") {
  std::vector<std::byte> buffer(1000);
  fill_pattern(buffer, 7, 3);
  for (std::size_t i = 0; i < buffer.size(); i += 97) CHECK(buffer[i] == pattern_byte(7, 3 + i));
  CHECK_FALSE(first_pattern_mismatch(buffer, 7, 3).has_value());
  for (std::size_t at : {std::size_t{0}, std::size_t{1}, std::size_t{511}, std::size_t{999}}) {
    auto copy = buffer;
    copy[at] ^= std::byte{0x01};
    const auto mismatch = first_pattern_mismatch(copy, 7, 3);
    REQUIRE(mismatch.has_value());
    CHECK(*mismatch == at);
  }
}

TEST_CASE("pattern: another seed, or the right bytes at a shifted offset, do not pass") {
  std::vector<std::byte> buffer(4096);
  fill_pattern(buffer, 7);
  CHECK(first_pattern_mismatch(buffer, 8).has_value());
  // A piece that landed 8 bytes off (a scatter/gather bug moving a whole word).
  CHECK(first_pattern_mismatch(std::span(buffer).subspan(8), 7, 0).has_value());
  CHECK(first_pattern_mismatch(std::span(buffer).subspan(1), 7, 0).has_value());
  CHECK_FALSE(first_pattern_mismatch(std::span(buffer).subspan(1000), 7, 1000).has_value());
}

TEST_CASE("pattern: filling piece by piece equals filling at once") {
  std::vector<std::byte> whole(300), pieces(300);
  fill_pattern(whole, 42);
  std::size_t offset = 0;
  for (std::size_t length : {std::size_t{5}, std::size_t{150}, std::size_t{145}}) {
    fill_pattern(std::span(pieces).subspan(offset, length), 42, offset);
    offset += length;
  }
  CHECK(whole == pieces);
}

TEST_CASE("first_byte_not finds the first byte that differs from a guard value") {
  std::vector<std::byte> guard(64, std::byte{0xA5});
  CHECK_FALSE(first_byte_not(guard, std::byte{0xA5}).has_value());
  guard[40] = std::byte{0};
  CHECK(first_byte_not(guard, std::byte{0xA5}) == std::optional<std::size_t>(40));
  CHECK(first_byte_not(std::span<const std::byte>(), std::byte{0}) == std::nullopt);
}

TEST_CASE("uneven_split: pieces sum to the total, none is empty, neighbours differ in length") {
  for (std::size_t total : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{4095}, std::size_t{4097},
                            std::size_t{65536}, std::size_t{8u << 20}}) {
    for (unsigned variant = 0; variant < 3; ++variant) {
      const auto pieces = uneven_split(total, 3, variant);
      INFO("total " << total << " variant " << variant);
      CHECK(pieces.size() == std::min<std::size_t>(3, total));
      CHECK(std::accumulate(pieces.begin(), pieces.end(), std::size_t{0}) == total);
      for (std::size_t p : pieces) CHECK(p > 0);
      if (total >= 64) {
        for (std::size_t k = 0; k + 1 < pieces.size(); ++k) CHECK(pieces[k] != pieces[k + 1]);
      }
    }
  }
  CHECK(uneven_split(0, 3, 0).empty());
}

TEST_CASE("uneven_split: two variants cut the same message at different offsets") {
  const auto a = uneven_split(65536, 3, 0);
  const auto b = uneven_split(65536, 3, 1);
  CHECK(a[0] != b[0]);
}

TEST_CASE("cases: names are unique and every data and error case is listed once") {
  std::set<std::string_view> names;
  for (const CaseInfo& info : all_cases()) CHECK(names.insert(info.name).second);
  CHECK(data_cases().size() + error_cases().size() == all_cases().size());
  CHECK(find_case("rc_write") != nullptr);
  CHECK(find_case("rc_write")->kind == CaseKind::Write);
  CHECK(find_case("ud_send")->transport == Transport::Ud);
  CHECK(find_case("nope") == nullptr);
}

TEST_CASE("options: a server and a client with cases and sizes") {
  auto server = parse({"--server", "--dev", "rv0", "--case", "rc_send,rc_read", "--sizes", "0,1,4K,1M"});
  REQUIRE(std::holds_alternative<Options>(server));
  const Options& s = std::get<Options>(server);
  CHECK(s.role == Role::Server);
  CHECK(s.device == "rv0");
  REQUIRE(s.cases.size() == 2);
  CHECK(s.cases[1]->name == "rc_read");
  CHECK(s.sizes == std::vector<std::size_t>{0, 1, 4096, 1u << 20});

  auto client = parse({"--connect", "10.1.2.3", "--dev", "rv1", "--case", "all", "--port", "20000", "--seed", "0x10"});
  REQUIRE(std::holds_alternative<Options>(client));
  const Options& c = std::get<Options>(client);
  CHECK(c.role == Role::Client);
  CHECK(c.peer_address == "10.1.2.3");
  CHECK(c.port == 20000);
  CHECK(c.seed == 16);
  CHECK(c.cases.size() == data_cases().size());
  CHECK(c.sizes == kDefaultSizes);
  CHECK_FALSE(c.ack_timeout.has_value());

  auto tuned = parse({"--server", "--dev", "v", "--case", "rc_read", "--ack-timeout", "18"});
  REQUIRE(std::holds_alternative<Options>(tuned));
  CHECK(std::get<Options>(tuned).ack_timeout == std::optional<std::uint8_t>(18));
}

TEST_CASE("options: --hold and --isolation need no case list") {
  CHECK(std::holds_alternative<Options>(parse({"--server", "--dev", "v", "--hold"})));
  CHECK(std::holds_alternative<Options>(parse({"--server", "--dev", "v", "--isolation", "owner", "--keys-file", "/tmp/k"})));
}

TEST_CASE("options: each mistake is refused with a reason") {
  CHECK(error_of({"--dev", "v", "--case", "rc_send"}).find("--server") != std::string::npos);
  CHECK(error_of({"--server", "--case", "rc_send"}).find("--dev") != std::string::npos);
  CHECK(error_of({"--server", "--connect", "1.2.3.4", "--dev", "v", "--case", "rc_send"}).find("one of") != std::string::npos);
  CHECK(error_of({"--connect", "host.example", "--dev", "v", "--case", "rc_send"}).find("IPv4") != std::string::npos);
  CHECK(error_of({"--server", "--dev", "v", "--case", "rc_sned"}).find("rc_sned") != std::string::npos);
  CHECK(error_of({"--server", "--dev", "v", "--case", "rc_send", "--sizes", "1,x"}).find("'x'") != std::string::npos);
  CHECK(error_of({"--server", "--dev", "v", "--case", "rc_send", "--sizes", "4096M"}).find("bad size") != std::string::npos);
  CHECK(error_of({"--server", "--dev", "v", "--case", "rc_send", "--port", "70000"}).find("port") != std::string::npos);
  CHECK(error_of({"--server", "--dev", "v"}).find("--case") != std::string::npos);
  CHECK(error_of({"--server", "--dev", "v", "--hold", "--case", "rc_send"}).find("no --case") != std::string::npos);
  CHECK(error_of({"--server", "--dev", "v", "--isolation", "owner"}).find("together") != std::string::npos);
  CHECK(error_of({"--server", "--dev"}).find("needs a value") != std::string::npos);
  CHECK(error_of({"--server", "--dev", "v", "--case", "rc_send", "--ack-timeout", "32"}).find("1..31") != std::string::npos);
  CHECK(error_of({"--server", "--dev", "v", "--case", "rc_send", "--bogus"}).find("--bogus") != std::string::npos);
}

TEST_CASE("fields: format and parse round-trip, and spaces in values become '_'") {
  Fields fields{{"step", "qp"}, {"qpn", "17"}, {"gid", "::ffff:10.1.2.3"}, {"reason", "bad thing happened"}};
  const std::string line = format_fields(fields);
  CHECK(line.find('\n') == std::string::npos);
  const auto back = parse_fields(line);
  REQUIRE(back.has_value());
  CHECK(back->at("qpn") == "17");
  CHECK(back->at("gid") == "::ffff:10.1.2.3");
  CHECK(back->at("reason") == "bad_thing_happened");
  CHECK(field_number(*back, "qpn") == std::optional<std::uint64_t>(17));
  CHECK_FALSE(field_number(*back, "gid").has_value());
  CHECK_FALSE(field_number(*back, "missing").has_value());
  CHECK_FALSE(parse_fields("novalue").has_value());
  CHECK_FALSE(parse_fields("=x").has_value());
}

TEST_CASE("side channel: lines cross a socketpair in order, steps are checked, EOF and timeouts throw") {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  SideChannel a = SideChannel::from_fd(fds[0]);
  SideChannel b = SideChannel::from_fd(fds[1]);
  a.send({{"step", "qp"}, {"qpn", "5"}});
  a.send({{"step", "done"}});
  a.send({{"step", "abort"}, {"reason", "no device"}});
  CHECK(field_number(b.expect("qp", 1s), "qpn") == std::optional<std::uint64_t>(5));
  CHECK_THROWS_WITH(b.expect("qp", 1s), Catch::Contains("out of step"));
  CHECK_THROWS_WITH(b.expect("qp", 1s), Catch::Contains("no_device"));
  CHECK_THROWS_WITH(b.receive_line(50ms), Catch::Contains("timed out"));
  { SideChannel closing = std::move(a); }
  CHECK_THROWS_WITH(b.receive_line(1s), Catch::Contains("closed"));
}

TEST_CASE("side channel: a client connects to a server over loopback TCP") {
  constexpr std::uint16_t port = 28517;
  std::thread server([] {
    SideChannel s = SideChannel::accept_one(port, 10s);
    s.send_line(s.receive_line(5s) + " back");
  });
  SideChannel c = SideChannel::connect_to("127.0.0.1", port, 10s);
  c.send_line("hello");
  CHECK(c.receive_line(5s) == "hello back");
  server.join();
}
