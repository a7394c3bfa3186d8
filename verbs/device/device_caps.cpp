#include "verbs/device/device_caps.h"

#include <cstring>

namespace rrdma::verbs::caps {

std::optional<int> mtu_bytes(int mtu) {
  if (mtu < IBV_MTU_256 || mtu > IBV_MTU_4096) return std::nullopt;
  return 256 << (mtu - IBV_MTU_256);
}

std::optional<ibv_mtu> active_mtu_for_netdev(int netdev_mtu) {
  const int room = netdev_mtu - kRoceHeadroom;
  for (int mtu = IBV_MTU_4096; mtu >= IBV_MTU_256; --mtu)
    if (*mtu_bytes(mtu) <= room) return static_cast<ibv_mtu>(mtu);
  return std::nullopt;
}

ibv_device_attr device_attributes() {
  ibv_device_attr a{};
  std::strncpy(a.fw_ver, "rrdma-vnic", sizeof a.fw_ver - 1);
  a.max_mr_size = kMaxMrSize;
  a.page_size_cap = 4096;  // process_vm_* work on any byte range; report the page size
  a.vendor_id = 0;         // no IEEE OUI of our own
  a.max_qp = static_cast<int>(kMaxQp);
  a.max_qp_wr = static_cast<int>(kMaxQpWr);
  // Only what the engine does: it sends RNR NAKs when no receive is posted, and binds memory
  // windows of type 1 and type 2B (a type 2 window is used through the QP that bound it, as
  // rxe's are; kernel 6.1's rxe also claims 2A, later kernels dropped it). No RESIZE_MAX_WR,
  // no AUTO_PATH_MIG (no alternate paths), no SRQ resize or CQ notify-N until they are built.
  a.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  a.max_mw = static_cast<int>(kMaxMw);
  a.max_sge = static_cast<int>(kMaxSgePerWr);
  a.max_sge_rd = static_cast<int>(kMaxSgePerWr);
  a.max_cq = static_cast<int>(kMaxCq);
  a.max_cqe = static_cast<int>(kMaxCqe);
  a.max_mr = static_cast<int>(kMaxMr);
  a.max_pd = static_cast<int>(kMaxPd);
  a.max_qp_rd_atom = kMaxQpRdAtom;
  a.max_qp_init_rd_atom = kMaxQpInitRdAtom;
  a.max_res_rd_atom = static_cast<int>(kMaxQp) * kMaxQpRdAtom;
  a.atomic_cap = kAtomicCap;
  a.max_ah = static_cast<int>(kMaxAh);
  a.max_srq = static_cast<int>(kMaxSrq);
  a.max_srq_wr = static_cast<int>(kMaxSrqWr);
  a.max_srq_sge = static_cast<int>(kMaxSrqSge);
  a.max_pkeys = kPkeyTableLen;
  a.phys_port_cnt = 1;
  return a;
}

ibv_port_attr port_attributes(bool link_up, int netdev_mtu) {
  ibv_port_attr p{};
  p.state = link_up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  p.max_mtu = kMaxMtu;
  p.active_mtu = active_mtu_for_netdev(netdev_mtu).value_or(IBV_MTU_256);
  p.gid_tbl_len = kGidTableLen;
  // RoCE ports have no subnet manager: the flags say which management classes we answer.
  // We answer none but report what a RoCE device needs apps to see (rxe reports the same
  // pair): a CM-capable port with an IP-based GID table.
  p.port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS;
  p.max_msg_sz = static_cast<std::uint32_t>(kMaxMsgSize);
  p.pkey_tbl_len = kPkeyTableLen;
  // Ethernet ports report a nominal speed; 1X at 25 Gb/s (EDR lane) as no hardware limits
  // a TAP device. IBV_WIDTH_1X = 1, IBV_SPEED_EDR = 32 (ibv_query_port(3)).
  p.active_width = 1;
  p.active_speed = 32;
  p.phys_state = link_up ? 5 : 3;  // PortPhysicalState codes (as sysfs phys_state shows): 5 LinkUp, 3 Disabled
  p.link_layer = IBV_LINK_LAYER_ETHERNET;
  return p;
}

ibv_gid gid_from_ipv4(stack::Ipv4Address address) {
  ibv_gid gid{};
  gid.raw[10] = 0xFF;
  gid.raw[11] = 0xFF;
  gid.raw[12] = static_cast<std::uint8_t>(address.value >> 24);
  gid.raw[13] = static_cast<std::uint8_t>(address.value >> 16);
  gid.raw[14] = static_cast<std::uint8_t>(address.value >> 8);
  gid.raw[15] = static_cast<std::uint8_t>(address.value);
  return gid;
}

bool is_ipv4_mapped(const ibv_gid& gid) {
  for (int i = 0; i < 10; ++i)
    if (gid.raw[i] != 0) return false;
  return gid.raw[10] == 0xFF && gid.raw[11] == 0xFF;
}

std::optional<stack::Ipv4Address> ipv4_from_gid(const ibv_gid& gid) {
  if (!is_ipv4_mapped(gid)) return std::nullopt;
  return stack::Ipv4Address{(std::uint32_t{gid.raw[12]} << 24) | (std::uint32_t{gid.raw[13]} << 16) |
                            (std::uint32_t{gid.raw[14]} << 8) | gid.raw[15]};
}

std::optional<GidEntry> gid_entry(int index, stack::Ipv4Address vnic_address) {
  if (index != 0) return std::nullopt;
  return GidEntry{gid_from_ipv4(vnic_address), IBV_GID_TYPE_ROCE_V2};
}

std::uint64_t node_guid(const stack::MacAddress& mac) {
  const std::uint8_t eui[8] = {static_cast<std::uint8_t>(mac.bytes[0] ^ 2), mac.bytes[1], mac.bytes[2],
                               0xFF, 0xFE, mac.bytes[3], mac.bytes[4], mac.bytes[5]};
  std::uint64_t word = 0;
  for (std::uint8_t byte : eui) word = (word << 8) | byte;
  return word;
}

}  // namespace rrdma::verbs::caps
