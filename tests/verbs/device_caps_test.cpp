// Capabilities, the port MTU rule (netdev MTU - 80, as rxe) and the GID <-> IPv4 mapping.
#include <catch2/catch.hpp>

#include <cstring>

#include "verbs/device/device_caps.h"

using namespace rrdma::verbs;
using rrdma::stack::Ipv4Address;

TEST_CASE("active MTU is the largest IB MTU that fits netdev MTU - 80") {
  CHECK(caps::active_mtu_for_netdev(1500) == IBV_MTU_1024);
  CHECK(caps::active_mtu_for_netdev(9000) == IBV_MTU_4096);
  CHECK(caps::active_mtu_for_netdev(1280) == IBV_MTU_1024);
  CHECK(caps::active_mtu_for_netdev(576) == IBV_MTU_256);
  CHECK(caps::active_mtu_for_netdev(336) == IBV_MTU_256);
  CHECK_FALSE(caps::active_mtu_for_netdev(335));
  CHECK(caps::active_mtu_for_netdev(2048 + 80) == IBV_MTU_2048);
  CHECK(caps::active_mtu_for_netdev(2048 + 79) == IBV_MTU_1024);
  CHECK_FALSE(caps::active_mtu_for_netdev(-1));
}

TEST_CASE("MTU enum to bytes") {
  CHECK(caps::mtu_bytes(IBV_MTU_256) == 256);
  CHECK(caps::mtu_bytes(IBV_MTU_4096) == 4096);
  CHECK_FALSE(caps::mtu_bytes(0));
  CHECK_FALSE(caps::mtu_bytes(6));
}

TEST_CASE("port attributes") {
  const ibv_port_attr up = caps::port_attributes(true, 1500);
  CHECK(up.state == IBV_PORT_ACTIVE);
  CHECK(up.active_mtu == IBV_MTU_1024);
  CHECK(up.max_mtu == IBV_MTU_4096);
  CHECK(up.link_layer == IBV_LINK_LAYER_ETHERNET);
  CHECK(up.gid_tbl_len == 1);
  CHECK(up.pkey_tbl_len == 1);
  CHECK((up.port_cap_flags & IBV_PORT_IP_BASED_GIDS) != 0);
  const ibv_port_attr down = caps::port_attributes(false, 9000);
  CHECK(down.state == IBV_PORT_DOWN);
  CHECK(down.active_mtu == IBV_MTU_4096);
}

TEST_CASE("device attributes agree with the ABI and tables they come from") {
  const ibv_device_attr d = caps::device_attributes();
  CHECK(d.max_sge == 16);
  CHECK(static_cast<std::uint32_t>(d.max_sge) == kMaxSge);
  CHECK(d.max_qp_wr == 65536);
  CHECK(d.max_cqe == 65536);
  CHECK(d.max_mr == 65535);
  CHECK(d.atomic_cap == IBV_ATOMIC_HCA);
  CHECK(d.max_qp_rd_atom == caps::kMaxQpRdAtom);
  CHECK(d.max_qp_init_rd_atom == caps::kMaxQpInitRdAtom);
  CHECK(d.phys_port_cnt == 1);
  // No APM, no resize: not built. Memory windows of type 1 and 2B (docs/VERBS_MEMORY.md).
  CHECK(d.device_cap_flags == (IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B));
  CHECK(d.max_mw == d.max_mr);  // one table for both
}

TEST_CASE("GID of 10.50.0.10 is ::ffff:10.50.0.10 and maps back") {
  const Ipv4Address ip = *Ipv4Address::parse("10.50.0.10");
  const ibv_gid gid = caps::gid_from_ipv4(ip);
  const std::uint8_t expected[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 50, 0, 10};
  CHECK(std::memcmp(gid.raw, expected, 16) == 0);
  CHECK(caps::ipv4_from_gid(gid) == ip);
  for (const char* text : {"0.0.0.0", "255.255.255.255", "192.168.1.77"}) {
    const Ipv4Address a = *Ipv4Address::parse(text);
    CHECK(caps::ipv4_from_gid(caps::gid_from_ipv4(a)) == a);
  }
  const auto entry = caps::gid_entry(0, ip);
  REQUIRE(entry);
  CHECK(entry->type == IBV_GID_TYPE_ROCE_V2);
  CHECK(std::memcmp(entry->gid.raw, expected, 16) == 0);
  CHECK_FALSE(caps::gid_entry(1, ip));
  CHECK_FALSE(caps::gid_entry(-1, ip));
}

TEST_CASE("non-mapped GIDs are refused") {
  ibv_gid link_local{};
  link_local.raw[0] = 0xFE;
  link_local.raw[1] = 0x80;
  link_local.raw[10] = 0xFF;
  link_local.raw[11] = 0xFF;
  CHECK_FALSE(caps::ipv4_from_gid(link_local));
  ibv_gid compat{};  // ::a.b.c.d (deprecated IPv4-compatible form), not mapped
  compat.raw[15] = 1;
  CHECK_FALSE(caps::ipv4_from_gid(compat));
  ibv_gid almost = caps::gid_from_ipv4({0x01020304});
  almost.raw[11] = 0xFE;
  CHECK_FALSE(caps::ipv4_from_gid(almost));
}
