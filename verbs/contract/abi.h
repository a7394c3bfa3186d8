// The fixed layouts of what travels in the data-path rings (verbs/contract/ring.h): send WQEs, receive
// WQEs and CQEs. This is our own ABI between our client library and our daemon, in host byte
// order, not a wire format: standard-layout structs whose every offset is pinned below, so
// that a library and a daemon built apart agree byte for byte. Numeric codes are the verbs
// ones (IBV_WR_*, IBV_SEND_*, IBV_WC_*), through the shared vocabulary of rocev2/verbs_codes.h.
//
// The daemon never trusts a WQE: it copies it out of the ring (RingConsumer does) and runs
// check_send_wqe() / check_recv_wqe() before using any field. docs/VERBS_ABI.md has the
// tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "rocev2/verbs_codes.h"

namespace rrdma::verbs {

inline constexpr std::uint32_t kMaxSge = 16;           // per send or receive WQE (max_sge)
inline constexpr std::uint32_t kMaxInlineData = 192;   // bytes (max_inline_data)
// The largest message (ibv_port_attr.max_msg_sz), as rxe reports: 2^31 bytes.
inline constexpr std::uint64_t kMaxMessageSize = 1ull << 31;

struct WqeSge {
  std::uint64_t addr;
  std::uint32_t length;
  std::uint32_t lkey;
};
static_assert(std::is_standard_layout_v<WqeSge> && std::is_trivially_copyable_v<WqeSge>);
static_assert(offsetof(WqeSge, addr) == 0 && offsetof(WqeSge, length) == 8 && offsetof(WqeSge, lkey) == 12);
static_assert(sizeof(WqeSge) == 16);

// One ibv_post_send() work request. With IBV_SEND_INLINE the payload is inline_data's first
// inline_length bytes (copied at post time) and the SGEs are ignored.
//
// IBA 1.5 Annex A19, posted by ibv_wr_atomic_write / ibv_wr_flush (no SGEs, never inline):
// ATOMIC_WRITE: compare_add holds its 8 bytes as they lay in the poster's memory.
// FLUSH: compare_add is the length of the range, swap the FETH's fields: the placement type
// in bits 7:0 and the selectivity level in bits 15:8 (ibv_wr_flush(3)'s type and level).
//
// The local operations carry no payload and reuse fields (their SGEs are ignored):
//   LOCAL_INV  invalidate_rkey = the R_Key to invalidate
//   BIND_MW    invalidate_rkey = the window's current R_Key, rkey = its new R_Key,
//              remote_addr = the address bound, compare_add = the length bound,
//              swap = the region's L_Key << 32 | the window's access flags (IBV_ACCESS_*)
struct SendWqe {
  std::uint64_t wr_id;
  std::uint32_t send_flags;       // IBV_SEND_* (rocev2::send_flags)
  std::uint8_t opcode;            // IBV_WR_* (rocev2::WrOpcode)
  std::uint8_t num_sge;
  std::uint16_t inline_length;
  std::uint64_t remote_addr;      // RDMA and atomic operations
  std::uint32_t rkey;
  std::uint32_t imm_data;         // the value ibv_send_wr holds (already network byte order)
  std::uint64_t compare_add;      // compare (CMP_AND_SWP) or add (FETCH_AND_ADD)
  std::uint64_t swap;
  std::uint32_t invalidate_rkey;  // SEND_WITH_INV
  std::uint32_t ah_handle;        // UD: the daemon's handle of the address handle
  std::uint32_t remote_qpn;       // UD
  std::uint32_t remote_qkey;      // UD
  WqeSge sge[kMaxSge];
  std::uint8_t inline_data[kMaxInlineData];
};
static_assert(std::is_standard_layout_v<SendWqe> && std::is_trivially_copyable_v<SendWqe>);
static_assert(offsetof(SendWqe, wr_id) == 0);
static_assert(offsetof(SendWqe, send_flags) == 8);
static_assert(offsetof(SendWqe, opcode) == 12);
static_assert(offsetof(SendWqe, num_sge) == 13);
static_assert(offsetof(SendWqe, inline_length) == 14);
static_assert(offsetof(SendWqe, remote_addr) == 16);
static_assert(offsetof(SendWqe, rkey) == 24);
static_assert(offsetof(SendWqe, imm_data) == 28);
static_assert(offsetof(SendWqe, compare_add) == 32);
static_assert(offsetof(SendWqe, swap) == 40);
static_assert(offsetof(SendWqe, invalidate_rkey) == 48);
static_assert(offsetof(SendWqe, ah_handle) == 52);
static_assert(offsetof(SendWqe, remote_qpn) == 56);
static_assert(offsetof(SendWqe, remote_qkey) == 60);
static_assert(offsetof(SendWqe, sge) == 64);
static_assert(offsetof(SendWqe, inline_data) == 320);
static_assert(sizeof(SendWqe) == 512);

// One ibv_post_recv() (or ibv_post_srq_recv()) work request.
struct RecvWqe {
  std::uint64_t wr_id;
  std::uint32_t num_sge;
  std::uint32_t reserved;
  WqeSge sge[kMaxSge];
};
static_assert(std::is_standard_layout_v<RecvWqe> && std::is_trivially_copyable_v<RecvWqe>);
static_assert(offsetof(RecvWqe, wr_id) == 0);
static_assert(offsetof(RecvWqe, num_sge) == 8);
static_assert(offsetof(RecvWqe, sge) == 16);
static_assert(sizeof(RecvWqe) == 272);

// One completion: the fields of struct ibv_wc, at the offsets and sizes ibv_wc has on LP64
// Linux (its enums are 4-byte ints), so the client's poll_cq is one copy per CQE.
struct Cqe {
  std::uint64_t wr_id;
  std::uint32_t status;          // IBV_WC_* status (rocev2::WcStatus)
  std::uint32_t opcode;          // IBV_WC_* opcode (rocev2::WcOpcode)
  std::uint32_t vendor_err;
  std::uint32_t byte_len;
  std::uint32_t imm_data;        // with IBV_WC_WITH_IMM (network byte order value); with
                                 // IBV_WC_WITH_INV the invalidated R_Key (ibv_wc's union)
  std::uint32_t qp_num;
  std::uint32_t src_qp;
  std::uint32_t wc_flags;        // IBV_WC_GRH, IBV_WC_WITH_IMM, IBV_WC_WITH_INV
  std::uint16_t pkey_index;
  std::uint16_t slid;
  std::uint8_t sl;
  std::uint8_t dlid_path_bits;
};
static_assert(std::is_standard_layout_v<Cqe> && std::is_trivially_copyable_v<Cqe>);
static_assert(offsetof(Cqe, wr_id) == 0);
static_assert(offsetof(Cqe, status) == 8);
static_assert(offsetof(Cqe, opcode) == 12);
static_assert(offsetof(Cqe, vendor_err) == 16);
static_assert(offsetof(Cqe, byte_len) == 20);
static_assert(offsetof(Cqe, imm_data) == 24);
static_assert(offsetof(Cqe, qp_num) == 28);
static_assert(offsetof(Cqe, src_qp) == 32);
static_assert(offsetof(Cqe, wc_flags) == 36);
static_assert(offsetof(Cqe, pkey_index) == 40);
static_assert(offsetof(Cqe, slid) == 42);
static_assert(offsetof(Cqe, sl) == 44);
static_assert(offsetof(Cqe, dlid_path_bits) == 45);
static_assert(sizeof(Cqe) == 48);

// One asynchronous event (ibv_get_async_event(3)) in a context's event ring (16-byte
// entries), pushed by the daemon, which then writes the context's event eventfd.
struct AsyncEventEntry {
  std::uint32_t event_type;  // enum ibv_event_type
  std::uint32_t reserved;
  std::uint64_t element;     // the daemon's handle of the QP, CQ or SRQ; the port number
                             // for IBV_EVENT_PORT_ACTIVE / PORT_ERR
};
static_assert(std::is_standard_layout_v<AsyncEventEntry> && std::is_trivially_copyable_v<AsyncEventEntry>);
static_assert(offsetof(AsyncEventEntry, event_type) == 0 && offsetof(AsyncEventEntry, element) == 8);
static_assert(sizeof(AsyncEventEntry) == 16);

// Why the daemon refuses a WQE. It then completes it with IBV_WC_LOC_QP_OP_ERR (or
// LOC_LEN_ERR for lengths) and moves the QP to the error state, as a NIC does with a
// malformed WQE.
enum class WqeError : std::uint8_t {
  None,
  UnknownOpcode,          // not an IBV_WR_* we implement (TSO, DRIVER1, FLUSH...)
  OpcodeNotForQpType,     // e.g. RDMA WRITE on UD, READ on UC
  UnknownSendFlags,       // a bit outside FENCE | SIGNALED | SOLICITED | INLINE
  TooManySges,            // num_sge > kMaxSge
  InlineTooLong,          // inline_length > kMaxInlineData
  InlineNotAllowed,       // INLINE on READ, atomics or local operations (nothing to carry out)
  MessageTooLong,         // the SGE lengths sum past kMaxMessageSize
  AtomicNotOneWord,       // atomics need exactly one SGE of 8 bytes
  AtomicMisaligned,       // remote_addr of an atomic not 8-byte aligned (IBA ch. 9: a naturally
                          // aligned 64-bit word)
  ReservedNotZero,        // RecvWqe.reserved
  SgesNotAllowed,         // FLUSH and ATOMIC_WRITE name no local memory
  FlushFieldsTooWide,     // FLUSH: a type or level the FETH cannot carry (4 and 2 bits)
};
const char* to_string(WqeError error);

struct WqeCheck {
  WqeError error = WqeError::None;
  std::uint64_t length = 0;  // message length in bytes, when error is None
};

WqeCheck check_send_wqe(const SendWqe& wqe, rocev2::QpType qp_type);

// FLUSH's fields in SendWqe.swap.
constexpr std::uint64_t flush_fields(std::uint8_t type, std::uint8_t level) {
  return std::uint64_t{type} | std::uint64_t{level} << 8;
}
constexpr std::uint8_t flush_type_of(std::uint64_t swap) { return static_cast<std::uint8_t>(swap & 0xFF); }
constexpr std::uint8_t flush_level_of(std::uint64_t swap) { return static_cast<std::uint8_t>((swap >> 8) & 0xFF); }
WqeCheck check_recv_wqe(const RecvWqe& wqe);

}  // namespace rrdma::verbs
