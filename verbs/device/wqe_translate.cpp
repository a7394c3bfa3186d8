#include "verbs/device/wqe_translate.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "stack/bytes.h"

namespace rrdma::verbs {

using rocev2::WrOpcode;

namespace {

// ConnectX's RoCE packet type for an IPv4 header (to_cqe).
constexpr std::uint8_t kRocePacketTypeIpv4 = 2;

// The WQE and the CQE hold the immediate as ibv_send_wr and ibv_wc do: a __be32, its bytes in
// memory in network order (abi.h). The engine's is the number whose big-endian bytes are the
// ImmDt on the wire (rocev2/wire.h). Copying one into the other reversed the bytes on the wire
// of a little-endian host: udaddy's QPN in the immediate reached rxe as 0 (docs/INTEROP.md,
// interop.rdma_cm_rxe).
std::uint32_t from_network_order(std::uint32_t in_memory) {
  std::array<std::uint8_t, 4> bytes{};
  std::memcpy(bytes.data(), &in_memory, bytes.size());
  return load_be32(bytes, 0);
}

std::uint32_t to_network_order(std::uint32_t value) {
  std::array<std::uint8_t, 4> bytes{};
  store_be32(bytes, 0, value);
  std::uint32_t in_memory = 0;
  std::memcpy(&in_memory, bytes.data(), bytes.size());
  return in_memory;
}

}  // namespace

rocev2::SendWr to_send_wr(const SendWqe& wqe) {
  rocev2::SendWr wr;
  wr.wr_id = wqe.wr_id;
  wr.opcode = static_cast<WrOpcode>(wqe.opcode);
  wr.flags = wqe.send_flags;
  if ((wqe.send_flags & rocev2::send_flags::kInline) != 0) {
    const std::size_t n = std::min<std::size_t>(wqe.inline_length, kMaxInlineData);
    wr.inline_data.assign(wqe.inline_data, wqe.inline_data + n);
  } else {
    const std::uint32_t n = std::min<std::uint32_t>(wqe.num_sge, kMaxSge);
    for (std::uint32_t i = 0; i < n; ++i) {
      wr.sg_list.push_back({wqe.sge[i].addr, wqe.sge[i].length, rocev2::Lkey(wqe.sge[i].lkey)});
    }
  }
  wr.imm_data = from_network_order(wqe.imm_data);
  wr.invalidate_rkey = rocev2::Rkey(wqe.invalidate_rkey);
  wr.remote_addr = wqe.remote_addr;
  wr.rkey = rocev2::Rkey(wqe.rkey);
  wr.compare_add = wqe.compare_add;
  wr.swap = wqe.swap;
  if (wr.opcode == WrOpcode::Flush) {
    // check_send_wqe bounds these: the length to 2^31, the type and level to the FETH's bits.
    wr.flush_length = static_cast<std::uint32_t>(std::min<std::uint64_t>(wqe.compare_add, kMaxMessageSize));
    wr.flush_type = flush_type_of(wqe.swap);
    wr.flush_level = flush_level_of(wqe.swap);
  }
  wr.ud_remote_qpn = rocev2::Qpn(wqe.remote_qpn);
  wr.ud_remote_qkey = rocev2::Qkey(wqe.remote_qkey);
  if (wr.opcode == WrOpcode::BindMw) {  // the field mapping of abi.h
    wr.bind.mw_rkey = rocev2::Rkey(wqe.invalidate_rkey);
    wr.bind.new_rkey = rocev2::Rkey(wqe.rkey);
    wr.bind.mr_lkey = rocev2::Lkey(static_cast<std::uint32_t>(wqe.swap >> 32));
    wr.bind.addr = wqe.remote_addr;
    wr.bind.length = wqe.compare_add;
    wr.bind.access = static_cast<std::uint32_t>(wqe.swap);
    wr.sg_list.clear();
  }
  if (wr.opcode == WrOpcode::LocalInv) wr.sg_list.clear();
  return wr;
}

rocev2::RecvWr to_recv_wr(const RecvWqe& wqe) {
  rocev2::RecvWr wr;
  fill_recv_wr(wqe, wr);
  return wr;
}

void fill_recv_wr(const RecvWqe& wqe, rocev2::RecvWr& wr) {
  wr.wr_id = wqe.wr_id;
  const std::uint32_t n = std::min<std::uint32_t>(wqe.num_sge, kMaxSge);
  for (std::uint32_t i = 0; i < n; ++i) {
    wr.sg_list.push_back({wqe.sge[i].addr, wqe.sge[i].length, rocev2::Lkey(wqe.sge[i].lkey)});
  }
}

Cqe to_cqe(const rocev2::Completion& c) {
  Cqe cqe{};
  cqe.wr_id = c.wr_id;
  cqe.status = static_cast<std::uint32_t>(c.status);
  cqe.opcode = static_cast<std::uint32_t>(c.opcode);
  cqe.byte_len = c.byte_len;
  cqe.imm_data = (c.flags & rocev2::wc_flags::kWithInv) != 0 ? c.invalidated_rkey.value() : to_network_order(c.imm_data);
  cqe.qp_num = c.qpn.value();
  cqe.src_qp = c.src_qp.value();
  cqe.wc_flags = c.flags;
  // RoCE has no LIDs and we have one P_Key (index 0): those IB fields stay 0. The SL of a
  // completion whose GRH area holds an IP header carries the RoCE packet type as ConnectX
  // reports it (its PRM: bits 2:0 are the L3 header type, 2 = IPv4), because UCX's UD
  // transport (before 1.18, openucx/ucx#10209) takes the GID's length from it: with SL 0, as
  // rxe leaves it, UCX reads an IPv6 destination GID out of an IPv4 header and silently drops
  // every packet. Our GIDs are all IPv4; nothing else reads an SL on RoCE (ibv_init_ah_from_wc
  // copies it into an address vector whose SL the vnic ignores). docs/IBVERBS.md.
  if ((c.flags & rocev2::wc_flags::kGrh) != 0) cqe.sl = kRocePacketTypeIpv4;
  return cqe;
}

}  // namespace rrdma::verbs
