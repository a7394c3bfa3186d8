#include <catch2/catch.hpp>

#include <set>

#include "vnic/config.h"

using rrdma::vnic::derive_mac;
using rrdma::vnic::derive_tap_mac;
using rrdma::vnic::UpArguments;
using rrdma::vnic::validate;

namespace {

UpArguments good_arguments() {
  UpArguments args;
  args.name = "rv0";
  args.ip = "10.66.0.10/24";
  return args;
}

std::string refusal(const UpArguments& args) {
  const auto result = validate(args);
  CHECK_FALSE(result.config);
  return result.error;
}

}  // namespace

TEST_CASE("derived MACs are locally administered unicast and distinct per name", "[vnic][config]") {
  std::set<rrdma::stack::MacAddress> seen;
  for (int i = 0; i < 2000; ++i) {
    const std::string name = "rv" + std::to_string(i);
    const auto mac = derive_mac(name);
    INFO(name << " -> " << mac.to_string());
    CHECK((mac.bytes[0] & 0x02) == 0x02);  // IEEE 802: locally administered
    CHECK_FALSE(mac.is_multicast());
    CHECK(mac == derive_mac(name));
    CHECK(derive_tap_mac(name, mac) != mac);
    seen.insert(mac);
  }
  CHECK(seen.size() == 2000);
}

TEST_CASE("derived MAC is stable across builds (FNV-1a, computed independently)", "[vnic][config]") {
  // FNV-1a 64 over "rv0\0", low byte first, first octet with bit 1 set and bit 0 clear;
  // computed with a three-line Python script, not with this code.
  CHECK(derive_mac("rv0").to_string() == "32:93:72:7e:1f:ea");
}

TEST_CASE("the TAP MAC differs even when the user picks the TAP's derived MAC", "[vnic][config]") {
  const auto would_be_tap = derive_mac("rv0", "tap");
  CHECK(derive_tap_mac("rv0", would_be_tap) != would_be_tap);
  CHECK_FALSE(derive_tap_mac("rv0", would_be_tap).is_multicast());
}

TEST_CASE("valid arguments become a config", "[vnic][config]") {
  auto args = good_arguments();
  args.mac = "02:00:00:aa:bb:cc";
  args.mtu = 9000;
  args.bridge = "br0";
  args.create_bridge = true;
  args.uplink = "eth1";
  args.gateway = "10.66.0.1";
  const auto result = validate(args);
  REQUIRE(result.config);
  const auto& config = *result.config;
  CHECK(config.name == "rv0");
  CHECK(config.address.address.to_string() == "10.66.0.10");
  CHECK(config.address.prefix_len == 24);
  CHECK(config.mac.to_string() == "02:00:00:aa:bb:cc");
  CHECK(config.tap_mac != config.mac);
  CHECK(config.mtu == 9000);
  CHECK(config.bridge == "br0");
  CHECK(config.create_bridge);
  CHECK(config.uplink == "eth1");
  REQUIRE(config.gateway);
  CHECK(config.gateway->to_string() == "10.66.0.1");
}

TEST_CASE("defaults: derived MAC, MTU 1500, no bridge", "[vnic][config]") {
  const auto result = validate(good_arguments());
  REQUIRE(result.config);
  CHECK(result.config->mac == derive_mac("rv0"));
  CHECK(result.config->mtu == 1500);
  CHECK_FALSE(result.config->bridge);
  CHECK_FALSE(result.config->gateway);
}

TEST_CASE("bad names are refused", "[vnic][config]") {
  for (const char* name : {"", "a-name-of-16-chr", "../etc", "a/b", "a b", ".", "..", "rv0\n"}) {
    auto args = good_arguments();
    args.name = name;
    INFO("name '" << name << "'");
    CHECK_THAT(refusal(args), Catch::Contains("bad name"));
  }
  auto args = good_arguments();
  args.name = "exactly15chars_";
  CHECK(validate(args).config);
}

TEST_CASE("bad addresses and prefixes are refused", "[vnic][config]") {
  for (const char* ip : {"10.66.0.10", "10.66.0.10/", "10.66.0.10/33", "10.66.0.10/0", "10.66.0/24",
                         "10.66.0.256/24", "10.66.0.0/24", "10.66.0.255/24", "127.0.0.1/8",
                         "224.0.0.5/24", "0.1.2.3/8", "255.255.255.255/32", "x"}) {
    auto args = good_arguments();
    args.ip = ip;
    INFO("ip '" << ip << "'");
    CHECK_FALSE(refusal(args).empty());
  }
  for (const char* ip : {"10.66.0.0/31", "10.66.0.7/32", "192.168.1.1/16"}) {
    auto args = good_arguments();
    args.ip = ip;
    INFO("ip '" << ip << "'");
    CHECK(validate(args).config);
  }
}

TEST_CASE("MTU outside 576..9000 is refused", "[vnic][config]") {
  for (std::uint32_t mtu : {0u, 575u, 9001u, 65536u + 1500u}) {
    auto args = good_arguments();
    args.mtu = mtu;
    INFO("mtu " << mtu);
    CHECK_THAT(refusal(args), Catch::Contains("bad MTU"));
  }
  for (std::uint32_t mtu : {576u, 9000u}) {
    auto args = good_arguments();
    args.mtu = mtu;
    CHECK(validate(args).config);
  }
}

TEST_CASE("a busy-poll window beyond a millisecond is refused", "[vnic][config]") {
  auto args = good_arguments();
  CHECK(validate(args).config->busy_poll_us == 0);  // off unless asked for
  args.busy_poll_us = 1001;
  CHECK_THAT(refusal(args), Catch::Contains("--busy-poll-us"));
  for (std::uint32_t microseconds : {1u, 50u, 1000u}) {
    args.busy_poll_us = microseconds;
    const auto accepted = validate(args);
    REQUIRE(accepted.config);
    CHECK(accepted.config->busy_poll_us == microseconds);
  }
}

TEST_CASE("the DMA wait bound: 0 (on the loop) by default, 1000 ms for a NIC shared with --group, up to a minute",
          "[vnic][config]") {
  auto args = good_arguments();
  CHECK(validate(args).config->dma_wait_ms == 0);
  // Shared with a group's members: one of them must not stall it for the rest.
  auto shared = args;
  shared.group = "rdma";
  CHECK(validate(shared).config->dma_wait_ms == rrdma::vnic::kSharedDmaWaitMilliseconds);
  shared.dma_wait_given = true;
  shared.dma_wait_ms = 0;  // asked for: the owner trusts every member's memory
  CHECK(validate(shared).config->dma_wait_ms == 0);
  args.dma_wait_given = true;
  args.dma_wait_ms = 60001;
  CHECK_THAT(refusal(args), Catch::Contains("--dma-wait-ms"));
  for (std::uint32_t milliseconds : {0u, 1u, 60000u}) {
    args.dma_wait_ms = milliseconds;
    const auto accepted = validate(args);
    REQUIRE(accepted.config);
    CHECK(accepted.config->dma_wait_ms == milliseconds);
  }
}

TEST_CASE("bad MACs are refused", "[vnic][config]") {
  for (const char* mac : {"01:00:5e:00:00:01", "ff:ff:ff:ff:ff:ff", "00:00:00:00:00:00",
                          "02:00:00:aa:bb", "02:00:00:aa:bb:cc:dd", "zz:00:00:aa:bb:cc"}) {
    auto args = good_arguments();
    args.mac = mac;
    INFO("mac '" << mac << "'");
    CHECK_THAT(refusal(args), Catch::Contains("MAC"));
  }
}

TEST_CASE("bad gateways are refused", "[vnic][config]") {
  for (const char* gateway : {"10.67.0.1", "10.66.0.10", "10.66.0", "banana"}) {
    auto args = good_arguments();
    args.gateway = gateway;
    INFO("gateway '" << gateway << "'");
    CHECK_THAT(refusal(args), Catch::Contains("gateway"));
  }
}

TEST_CASE("bridge options must be consistent", "[vnic][config]") {
  auto args = good_arguments();
  args.create_bridge = true;
  CHECK_THAT(refusal(args), Catch::Contains("--create-bridge"));
  args = good_arguments();
  args.uplink = "eth1";
  CHECK_THAT(refusal(args), Catch::Contains("--uplink"));
  args = good_arguments();
  args.bridge = "br0";
  args.uplink = "br0";
  CHECK_FALSE(refusal(args).empty());
  args = good_arguments();
  args.bridge = "rv0";
  CHECK_FALSE(refusal(args).empty());
}

TEST_CASE("up --group takes a group name, not a path or an option", "[vnic][config]") {
  UpArguments args;
  args.name = "rv0";
  args.ip = "10.66.0.10/24";
  args.group = "rdma-users";
  const auto accepted = validate(args);
  REQUIRE(accepted.config);
  CHECK(accepted.config->group == std::optional<std::string>("rdma-users"));
  for (const char* bad : {"", "-rdma", "a/b", "x:y", "name with space", "abcdefghijklmnopqrstuvwxyz0123456"}) {
    args.group = bad;
    const auto refused = validate(args);
    CHECK_FALSE(refused.config);
    CHECK(refused.error.find("group") != std::string::npos);
  }
}

TEST_CASE("quota options: in range they reach the config, out of range they are refused", "[vnic][config]") {
  using rrdma::verbs::ResourceKind;
  UpArguments args = good_arguments();
  args.quotas.of(ResourceKind::Qp) = 5000;
  args.quotas.ring_bytes = std::uint64_t{2} << 30;
  const auto result = validate(args);
  REQUIRE(result.config);
  CHECK(result.config->quotas.of(ResourceKind::Qp) == 5000u);
  CHECK_FALSE(result.config->quotas.of(ResourceKind::Cq));
  CHECK(result.config->quotas.ring_bytes == std::uint64_t{2} << 30);

  // Applied over the daemon's defaults: only what was given changes.
  rrdma::verbs::Quotas defaults;
  defaults.of(ResourceKind::Qp) = 729;
  defaults.of(ResourceKind::Cq) = 546;
  const auto applied = result.config->quotas.applied_to(defaults);
  CHECK(applied.of(ResourceKind::Qp) == 5000u);
  CHECK(applied.of(ResourceKind::Cq) == 546u);
  CHECK(applied.ring_bytes == std::uint64_t{2} << 30);

  for (const auto& option : rrdma::vnic::quota_options()) {
    INFO(option.flag);
    UpArguments zero = good_arguments();
    zero.quotas.of(option.kind) = 0;
    CHECK(refusal(zero) == std::string("bad ") + option.flag + " 0: expected 1.." + std::to_string(option.max) + " " +
                               option.objects);
    UpArguments over = good_arguments();
    over.quotas.of(option.kind) = option.max + 1;
    CHECK_FALSE(refusal(over).empty());
    UpArguments top = good_arguments();
    top.quotas.of(option.kind) = option.max;
    CHECK(validate(top).config);
  }
  UpArguments small = good_arguments();
  small.quotas.ring_bytes = 4096;
  CHECK(refusal(small).rfind("bad --max-ring-bytes-per-process 4096: expected 1048576..", 0) == 0);
  // The 5,000-QP test's setting: within the device's cap of 16384.
  CHECK(rrdma::vnic::quota_options()[static_cast<std::size_t>(ResourceKind::Qp)].max == 16384u);
}

TEST_CASE("up --netdev: the interface gives address, MAC and MTU, and TAP options are refused", "[vnic][config][netdev]") {
  UpArguments args;
  args.name = "rr0";
  args.netdev = "eth0";
  const auto accepted = validate(args);
  REQUIRE(accepted.config);
  CHECK(accepted.config->netdev == "eth0");
  CHECK_FALSE(accepted.config->bridge);
  CHECK(accepted.config->udp_offload);  // runs of datagrams by default
  UpArguments plain = args;
  plain.no_udp_offload = true;
  REQUIRE(validate(plain).config);
  CHECK_FALSE(validate(plain).config->udp_offload);
  for (const char* flag : {"--ip", "--mac", "--mtu", "--bridge", "--create-bridge", "--uplink", "--gateway"}) {
    UpArguments bad = args;
    const std::string f(flag);
    if (f == "--ip") bad.ip = "10.0.0.1/24";
    if (f == "--mac") bad.mac = "02:00:00:00:00:01";
    if (f == "--mtu") bad.mtu_given = true;
    if (f == "--bridge") bad.bridge = "br0";
    if (f == "--create-bridge") bad.create_bridge = true;
    if (f == "--uplink") bad.uplink = "eth1";
    if (f == "--gateway") bad.gateway = "10.0.0.254";
    CHECK(refusal(bad) == f + " cannot go with --netdev: the interface eth0 has its own address, MAC and MTU");
  }
  UpArguments bad_interface = args;
  bad_interface.netdev = "../etc";
  CHECK(refusal(bad_interface) == "bad interface name '../etc'");
}
