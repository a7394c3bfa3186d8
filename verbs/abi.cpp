#include "verbs/abi.h"

#include <algorithm>

namespace rrdma::verbs {

namespace {

using rocev2::QpType;
using rocev2::WrOpcode;

constexpr std::uint32_t kKnownSendFlags = rocev2::send_flags::kFence | rocev2::send_flags::kSignaled |
                                          rocev2::send_flags::kSolicited | rocev2::send_flags::kInline;

bool is_known(std::uint8_t opcode) {
  switch (static_cast<WrOpcode>(opcode)) {
    case WrOpcode::RdmaWrite:
    case WrOpcode::RdmaWriteWithImm:
    case WrOpcode::Send:
    case WrOpcode::SendWithImm:
    case WrOpcode::RdmaRead:
    case WrOpcode::AtomicCmpSwp:
    case WrOpcode::AtomicFetchAdd:
    case WrOpcode::SendWithInv:
      return true;
  }
  return false;
}

// Which operations each transport carries: the IBA OpCode table has no RDMA or atomics for
// UD, and neither READ, atomics nor SEND with invalidate for UC.
bool allowed_on(WrOpcode opcode, QpType qp_type) {
  const bool send = opcode == WrOpcode::Send || opcode == WrOpcode::SendWithImm;
  const bool write = opcode == WrOpcode::RdmaWrite || opcode == WrOpcode::RdmaWriteWithImm;
  switch (qp_type) {
    case QpType::Rc: return true;
    case QpType::Uc: return send || write;
    case QpType::Ud: return send;
  }
  return false;
}

bool is_atomic(WrOpcode opcode) { return opcode == WrOpcode::AtomicCmpSwp || opcode == WrOpcode::AtomicFetchAdd; }

// Sums in 64 bits: at most kMaxSge lengths of 2^32 - 1 cannot overflow it.
WqeCheck sum_sges(const WqeSge* sges, std::uint32_t count) {
  if (count > kMaxSge) return {WqeError::TooManySges, 0};
  std::uint64_t total = 0;
  for (std::uint32_t i = 0; i < count; ++i) total += sges[i].length;
  if (total > kMaxMessageSize) return {WqeError::MessageTooLong, 0};
  return {WqeError::None, total};
}

}  // namespace

const char* to_string(WqeError error) {
  switch (error) {
    case WqeError::None: return "no error";
    case WqeError::UnknownOpcode: return "unknown or unsupported opcode";
    case WqeError::OpcodeNotForQpType: return "opcode not allowed on this QP type";
    case WqeError::UnknownSendFlags: return "unknown send flags";
    case WqeError::TooManySges: return "too many scatter/gather entries";
    case WqeError::InlineTooLong: return "inline data too long";
    case WqeError::InlineNotAllowed: return "inline data not allowed for this opcode";
    case WqeError::MessageTooLong: return "message longer than the maximum message size";
    case WqeError::AtomicNotOneWord: return "atomic needs one 8-byte scatter/gather entry";
    case WqeError::AtomicMisaligned: return "atomic remote address not 8-byte aligned";
    case WqeError::ReservedNotZero: return "reserved field not zero";
  }
  return "unknown WQE error";
}

WqeCheck check_send_wqe(const SendWqe& wqe, rocev2::QpType qp_type) {
  if (!is_known(wqe.opcode)) return {WqeError::UnknownOpcode, 0};
  const auto opcode = static_cast<WrOpcode>(wqe.opcode);
  if (!allowed_on(opcode, qp_type)) return {WqeError::OpcodeNotForQpType, 0};
  if ((wqe.send_flags & ~kKnownSendFlags) != 0) return {WqeError::UnknownSendFlags, 0};
  if ((wqe.send_flags & rocev2::send_flags::kInline) != 0) {
    if (opcode == WrOpcode::RdmaRead || is_atomic(opcode)) return {WqeError::InlineNotAllowed, 0};
    if (wqe.inline_length > kMaxInlineData) return {WqeError::InlineTooLong, 0};
    return {WqeError::None, wqe.inline_length};
  }
  const WqeCheck sum = sum_sges(wqe.sge, wqe.num_sge);
  if (sum.error != WqeError::None || !is_atomic(opcode)) return sum;
  if (wqe.num_sge != 1 || sum.length != 8) return {WqeError::AtomicNotOneWord, 0};
  if (wqe.remote_addr % 8 != 0) return {WqeError::AtomicMisaligned, 0};
  return sum;
}

WqeCheck check_recv_wqe(const RecvWqe& wqe) {
  if (wqe.reserved != 0) return {WqeError::ReservedNotZero, 0};
  return sum_sges(wqe.sge, wqe.num_sge);
}

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
  wr.imm_data = wqe.imm_data;
  wr.invalidate_rkey = rocev2::Rkey(wqe.invalidate_rkey);
  wr.remote_addr = wqe.remote_addr;
  wr.rkey = rocev2::Rkey(wqe.rkey);
  wr.compare_add = wqe.compare_add;
  wr.swap = wqe.swap;
  wr.ud_remote_qpn = rocev2::Qpn(wqe.remote_qpn);
  wr.ud_remote_qkey = rocev2::Qkey(wqe.remote_qkey);
  return wr;
}

rocev2::RecvWr to_recv_wr(const RecvWqe& wqe) {
  rocev2::RecvWr wr;
  wr.wr_id = wqe.wr_id;
  const std::uint32_t n = std::min<std::uint32_t>(wqe.num_sge, kMaxSge);
  for (std::uint32_t i = 0; i < n; ++i) {
    wr.sg_list.push_back({wqe.sge[i].addr, wqe.sge[i].length, rocev2::Lkey(wqe.sge[i].lkey)});
  }
  return wr;
}

Cqe to_cqe(const rocev2::Completion& c) {
  Cqe cqe{};
  cqe.wr_id = c.wr_id;
  cqe.status = static_cast<std::uint32_t>(c.status);
  cqe.opcode = static_cast<std::uint32_t>(c.opcode);
  cqe.byte_len = c.byte_len;
  cqe.imm_data = (c.flags & rocev2::wc_flags::kWithInv) != 0 ? c.invalidated_rkey.value() : c.imm_data;
  cqe.qp_num = c.qpn.value();
  cqe.src_qp = c.src_qp.value();
  cqe.wc_flags = c.flags;
  // RoCE has no LIDs or SLs and we have one P_Key (index 0): ibv_wc's IB fields stay 0.
  return cqe;
}

}  // namespace rrdma::verbs
