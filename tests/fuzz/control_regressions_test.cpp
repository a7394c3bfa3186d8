// Replays every input the control-socket fuzz targets kept in tests/fuzz/regressions/<target>/
// through the same property check as the target, in every build (gcc or clang, with or
// without sanitizers); and the seeds a target starts from, written by control_seeds
// (a property that fails on a seed is a bug too, found without fuzzing).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/fuzz/admin_json_properties.h"
#include "tests/fuzz/credentials_properties.h"
#include "tests/fuzz/interfaces_properties.h"
#include "tests/fuzz/control_frame_properties.h"
#include "tests/fuzz/nic_requests_properties.h"
#include "tests/fuzz/ucma_properties.h"

#include <random>

namespace rrdma::fuzz {
namespace {

namespace fs = std::filesystem;
using Check = const char* (*)(ByteSpan);

std::vector<std::uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Every regular file of `dir` but dotfiles (.gitkeep) through `check`; how many there were.
std::size_t replay(const fs::path& dir, Check check) {
  std::size_t replayed = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().filename().string().starts_with(".")) continue;
    const std::vector<std::uint8_t> bytes = read_bytes(entry.path());
    INFO(entry.path().string());
    const char* failed = check(bytes);
    CHECK(failed == nullptr);
    if (failed) UNSCOPED_INFO(failed);
    ++replayed;
  }
  return replayed;
}

const fs::path kRegressions = RRDMA_FUZZ_REGRESSIONS_DIR;

TEST_CASE("Fuzz regressions: every kept admin JSON request passes its properties", "[fuzz][hostile]") {
  WARN("replayed " << replay(kRegressions / "admin_json", check_admin_json) << " admin_json regressions");
}

TEST_CASE("Fuzz regressions: every kept control frame passes its properties", "[fuzz][hostile]") {
  WARN("replayed " << replay(kRegressions / "control_frame", check_control_frame) << " control_frame regressions");
}

TEST_CASE("Fuzz regressions: every kept /proc/PID/status text passes its properties", "[fuzz][hostile]") {
  WARN("replayed " << replay(kRegressions / "credentials", check_credentials) << " credentials regressions");
  // The seed run-fuzz.sh starts from: a real status file parses, with this process's ids.
  std::ifstream status("/proc/self/status");
  const std::string text((std::istreambuf_iterator<char>(status)), std::istreambuf_iterator<char>());
  CHECK(check_credentials(rrdma::ByteSpan(reinterpret_cast<const std::uint8_t*>(text.data()), text.size())) == nullptr);
  const auto parsed = rrdma::verbs::parse_credentials(text);
  REQUIRE(parsed);
  CHECK(parsed->uids[1] == ::geteuid());
  CHECK(parsed->gids[1] == ::getegid());
}

TEST_CASE("Fuzz regressions: every kept RRDMA_INTERFACES text passes its properties", "[fuzz][hostile]") {
  WARN("replayed " << replay(kRegressions / "interfaces", check_interfaces) << " interfaces regressions");
  // The seed run-fuzz.sh starts from, and texts at the edges: every property holds.
  for (const std::string text : {"rv0=10.66.0.10/24;rv_1.b-2=192.168.7.1/32", "", ";;;", "a=0.0.0.0/32",
                                 "0123456789abcde=255.255.255.255/1", "x=1.2.3.4/24;x=1.2.3.4/24"}) {
    INFO(text);
    CHECK(check_interfaces(rrdma::ByteSpan(reinterpret_cast<const std::uint8_t*>(text.data()), text.size())) == nullptr);
  }
}

TEST_CASE("Fuzz regressions: every kept Nic request script passes its properties", "[fuzz][hostile]") {
  WARN("replayed " << replay(kRegressions / "nic_requests", check_nic_requests) << " nic_requests regressions");
}

TEST_CASE("Fuzz regressions: every kept rdma_cm script passes its properties, and so do random ones", "[fuzz][hostile]") {
  std::filesystem::create_directories(kRegressions / "ucma");
  WARN("replayed " << replay(kRegressions / "ucma", [](ByteSpan in) { return check_ucma(in); }) << " ucma regressions");
  // The seeds run clean.
  for (bool ud : {false, true}) {
    std::size_t succeeded = 0;
    CHECK(check_ucma(ucma_seed_script(ud), &succeeded) == nullptr);
    CHECK(succeeded == (ud ? 18u : 24u));  // every command of the script
  }
  // Without a fuzzer: scripts from a fixed seed, biased towards the steps that make state
  // (channels, commands on small ids, MAD delivery, time).
  std::mt19937 random(18);
  for (int i = 0; i < 300; ++i) {
    std::vector<std::uint8_t> script(64 + random() % 1500);
    for (auto& byte : script) byte = static_cast<std::uint8_t>(random());
    script[0] &= 0x7F;  // a script, not the codec mode
    INFO("random script " << i);
    const char* failed = check_ucma(script);
    CHECK(failed == nullptr);
    if (failed) UNSCOPED_INFO(failed);
  }
}

// The seeds reach the success paths, so that the fuzzer mutates requests the daemon takes,
// not only ones it refuses at the first check.
TEST_CASE("Fuzz seeds: the control targets' seeds are accepted requests", "[fuzz]") {
  const fs::path dir = fs::temp_directory_path() / ("rrdma-control-seeds-ok-" + std::to_string(::getpid()));
  REQUIRE(std::system((std::string(RRDMA_CONTROL_SEEDS) + " " + dir.string()).c_str()) == 0);
  std::size_t frames = 0;
  for (const auto& entry : fs::directory_iterator(dir / "control_frame")) {
    const std::vector<std::uint8_t> bytes = read_bytes(entry.path());
    REQUIRE(bytes.size() > 1);
    verbs::control::Message message;
    INFO(entry.path().filename().string());
    CHECK(verbs::control::parse(ByteSpan(bytes).subspan(1), bytes[0], message) == verbs::control::DecodeError::None);
    ++frames;
  }
  CHECK(frames == 2 * verbs::control::kMessageTypeCount);

  // The longest script: every creating request is accepted, then every destroy.
  std::vector<std::uint8_t> longest;
  for (const auto& entry : fs::directory_iterator(dir / "nic_requests")) {
    std::vector<std::uint8_t> bytes = read_bytes(entry.path());
    if (bytes.size() > longest.size()) longest = std::move(bytes);
  }
  NicScriptTally tally;
  CountingPort port;
  IdleWatcher watcher;
  verbs::Nic nic(verbs::NicConfig{stack::Ipv4Address{0x0A420001}, stack::MacAddress{{2, 0, 0, 0, 0, 1}}, 1500, true, {}, {}, verbs::Quotas::kUnlimited},
                 port, watcher);
  REQUIRE(nic.client_connected({1, ::getpid(), ::getuid()}) == 0);
  REQUIRE(nic.client_connected({2, ::getpid(), ::getuid()}) == 0);
  CHECK(run_nic_script(longest, nic, &tally) == nullptr);
  using verbs::control::MessageType;
  for (MessageType type : {MessageType::OpenDevice, MessageType::QueryDevice, MessageType::QueryPort, MessageType::QueryGid,
                           MessageType::AllocPd, MessageType::RegMr, MessageType::AllocMw, MessageType::DeallocMw,
                           MessageType::CreateCq, MessageType::CreateSrq,
                           MessageType::CreateQp, MessageType::QueryQp, MessageType::CreateAh, MessageType::ResizeCq,
                           MessageType::DestroyQp, MessageType::DestroySrq, MessageType::DeregMr, MessageType::DestroyCq,
                           MessageType::DestroyAh, MessageType::DeallocPd}) {
    INFO(verbs::control::message_name(type));
    CHECK(tally.accepted.count(type) == 1);
  }
  CHECK(tally.refused.count(MessageType::ModifyQp) == 1);  // INIT without port, P_Key, access
  fs::remove_all(dir);
}

TEST_CASE("Fuzz seeds: the control targets' seed corpora pass their properties", "[fuzz]") {
  const fs::path dir = fs::temp_directory_path() / ("rrdma-control-seeds-" + std::to_string(::getpid()));
  REQUIRE(std::system((std::string(RRDMA_CONTROL_SEEDS) + " " + dir.string()).c_str()) == 0);
  CHECK(replay(dir / "admin_json", check_admin_json) >= 10);
  CHECK(replay(dir / "control_frame", check_control_frame) == 2 * verbs::control::kMessageTypeCount);
  CHECK(replay(dir / "nic_requests", check_nic_requests) >= 10);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rrdma::fuzz
