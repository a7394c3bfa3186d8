#include "verbs/contract/abi.h"

#include <algorithm>

namespace rrdma::verbs {

namespace {

using rocev2::WrOpcode;

constexpr std::uint32_t kKnownSendFlags = rocev2::send_flags::kFence | rocev2::send_flags::kSignaled |
                                          rocev2::send_flags::kSolicited | rocev2::send_flags::kInline;

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
    case WqeError::SgesNotAllowed: return "FLUSH and ATOMIC_WRITE take no scatter/gather entries";
    case WqeError::FlushFieldsTooWide: return "FLUSH type or level does not fit the FETH";
  }
  return "unknown WQE error";
}

namespace {

// IBA 1.5 A19 requests carry their operands in the WQE (abi.h). The responder checks the
// rest (alignment, a defined type and level) and NAKs as rxe does, so that a peer's answer
// and ours agree; here only what cannot be put on the wire is refused.
WqeCheck check_placement(const SendWqe& wqe, const rocev2::WrOpcodeInfo& op) {
  if (wqe.num_sge != 0) return {WqeError::SgesNotAllowed, 0};
  if (op.atomic_write) return {WqeError::None, 8};
  if (flush_type_of(wqe.swap) > 0xF || flush_level_of(wqe.swap) > 0x3 || (wqe.swap >> 16) != 0)
    return {WqeError::FlushFieldsTooWide, 0};
  if (wqe.compare_add > kMaxMessageSize) return {WqeError::MessageTooLong, 0};
  return {WqeError::None, 0};
}

}  // namespace

WqeCheck check_send_wqe(const SendWqe& wqe, rocev2::QpType qp_type) {
  const rocev2::WrOpcodeInfo& op = rocev2::wr_opcode_info(static_cast<WrOpcode>(wqe.opcode));
  if (!op.implemented) return {WqeError::UnknownOpcode, 0};
  if (!op.allowed_on(qp_type)) return {WqeError::OpcodeNotForQpType, 0};
  if ((wqe.send_flags & ~kKnownSendFlags) != 0) return {WqeError::UnknownSendFlags, 0};
  if (op.local) {
    // A local operation has no payload: inline data on one is a malformed request.
    if ((wqe.send_flags & rocev2::send_flags::kInline) != 0) return {WqeError::InlineNotAllowed, 0};
    return {WqeError::None, 0};
  }
  if ((wqe.send_flags & rocev2::send_flags::kInline) != 0) {
    if (op.holds_responder_resource()) return {WqeError::InlineNotAllowed, 0};
    if (wqe.inline_length > kMaxInlineData) return {WqeError::InlineTooLong, 0};
    return {WqeError::None, wqe.inline_length};
  }
  if (op.empty_read_response()) return check_placement(wqe, op);
  const WqeCheck sum = sum_sges(wqe.sge, wqe.num_sge);
  if (sum.error != WqeError::None || !op.atomic) return sum;
  if (wqe.num_sge != 1 || sum.length != 8) return {WqeError::AtomicNotOneWord, 0};
  if (wqe.remote_addr % 8 != 0) return {WqeError::AtomicMisaligned, 0};
  return sum;
}

WqeCheck check_recv_wqe(const RecvWqe& wqe) {
  if (wqe.reserved != 0) return {WqeError::ReservedNotZero, 0};
  return sum_sges(wqe.sge, wqe.num_sge);
}

}  // namespace rrdma::verbs
