// The verbs vocabulary every layer shares, with libibverbs' numbers (infiniband/verbs.h): QP
// types and states, work-request and completion opcodes, completion statuses, async events,
// and the flag bits of access rights, sends, completions and modify_qp masks. A value passes
// from an application's ibv_* call through our ring ABI (verbs/contract/abi.h) into the engine
// unchanged, and each of these enums is defined here and nowhere else: the engine, the
// daemon's device, the client library and the C++ API all name these.
//
// Also the work-request opcode table: for each IBV_WR_* its name, its completion opcode, the
// transports that carry it, and its wire opcodes, with what those carry (RETH, AtomicETH,
// ImmDt, IETH) read from the BTH opcode table (rocev2/opcode.h) at compile time. Code asks the
// table instead of switching on work-request opcodes; adding an operation is a row here plus
// the engine's handling of it (docs/ARCHITECTURE.md, "Adding a work-request opcode").
//
// Header-only and constexpr, so that the application's libraries (verbs/app) can use it
// without linking rocev2 (tests/layering checks that they do not).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "rocev2/opcode.h"

namespace rrdma::rocev2 {

enum class QpType : std::uint32_t { Rc = 2, Uc = 3, Ud = 4 };  // IBV_QPT_*

enum class QpState : std::uint32_t {  // IBV_QPS_* (IBA ch. 10)
  Reset = 0, Init = 1, Rtr = 2, Rts = 3, Sqd = 4, Sqe = 5, Err = 6
};

enum class WrOpcode : std::uint32_t {  // IBV_WR_*
  RdmaWrite = 0, RdmaWriteWithImm = 1, Send = 2, SendWithImm = 3, RdmaRead = 4,
  AtomicCmpSwp = 5, AtomicFetchAdd = 6, LocalInv = 7, BindMw = 8, SendWithInv = 9,
  Tso = 10, Driver1 = 11, Flush = 14, AtomicWrite = 15,  // FLUSH: rdma-core 45 on; Debian 12 has 44
};

enum class WcStatus : std::uint32_t {  // IBV_WC_* status
  Success = 0, LocLenErr = 1, LocQpOpErr = 2, LocEecOpErr = 3, LocProtErr = 4,
  WrFlushErr = 5, MwBindErr = 6, BadRespErr = 7, LocAccessErr = 8, RemInvReqErr = 9,
  RemAccessErr = 10, RemOpErr = 11, RetryExcErr = 12, RnrRetryExcErr = 13,
  LocRddViolErr = 14, RemInvRdReqErr = 15, RemAbortErr = 16, InvEecnErr = 17,
  InvEecStateErr = 18, FatalErr = 19, RespTimeoutErr = 20, GeneralErr = 21,
  TmErr = 22, TmRndvIncomplete = 23,
};

enum class WcOpcode : std::uint32_t {  // IBV_WC_* opcode; receive completions have bit 7 set
  Send = 0, RdmaWrite = 1, RdmaRead = 2, CompSwap = 3, FetchAdd = 4, BindMw = 5,
  LocalInv = 6, Tso = 7, Flush = 8 /* rdma-core 45 on */, AtomicWrite = 9, Recv = 128, RecvRdmaWithImm = 129,
};

enum class EventType : std::uint32_t {  // IBV_EVENT_*
  CqErr = 0, QpFatal = 1, QpReqErr = 2, QpAccessErr = 3, CommEst = 4, SqDrained = 5,
  PathMig = 6, PathMigErr = 7, DeviceFatal = 8, PortActive = 9, PortErr = 10,
  LidChange = 11, PkeyChange = 12, SmChange = 13, SrqErr = 14, SrqLimitReached = 15,
  QpLastWqeReached = 16, ClientReregister = 17, GidChange = 18, WqFatal = 19,
};

// IBV_ACCESS_*: what an MR allows, and what a QP's responder grants.
namespace access {
inline constexpr std::uint32_t kLocalWrite = 1u << 0;
inline constexpr std::uint32_t kRemoteWrite = 1u << 1;
inline constexpr std::uint32_t kRemoteRead = 1u << 2;
inline constexpr std::uint32_t kRemoteAtomic = 1u << 3;
inline constexpr std::uint32_t kAll = kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic;
// IBA 1.5 Annex A19 (Memory Placement Extensions): the placement types a FLUSH may ask of an
// MR, and of a QP's responder (IBV_ACCESS_FLUSH_GLOBAL / _PERSISTENT, rdma-core 45 on).
inline constexpr std::uint32_t kFlushGlobal = 1u << 8;
inline constexpr std::uint32_t kFlushPersistent = 1u << 9;
}  // namespace access

// The FLUSH Extended Transport Header's fields (IBA 1.5 A19.4.1; ibv_wr_flush(3)'s `type` and
// `level`): the placement type (bits 3:0) and the selectivity level (bits 5:4).
namespace flush {
inline constexpr std::uint8_t kGlobal = 1u << 0;       // IBV_FLUSH_GLOBAL: globally visible
inline constexpr std::uint8_t kPersistent = 1u << 1;   // IBV_FLUSH_PERSISTENT: persistent
inline constexpr std::uint8_t kLevelRange = 0;         // IBV_FLUSH_RANGE: the RETH's range
inline constexpr std::uint8_t kLevelMr = 1;            // IBV_FLUSH_MR: the whole region
constexpr std::uint32_t feth_bits(std::uint8_t type, std::uint8_t level) {
  return (std::uint32_t{level} & 0x3u) << 4 | (std::uint32_t{type} & 0xFu);
}
constexpr std::uint8_t feth_type(std::uint32_t bits) { return static_cast<std::uint8_t>(bits & 0xFu); }
constexpr std::uint8_t feth_level(std::uint32_t bits) { return static_cast<std::uint8_t>((bits >> 4) & 0x3u); }
}  // namespace flush

namespace send_flags {  // IBV_SEND_*
inline constexpr std::uint32_t kFence = 1u << 0;
inline constexpr std::uint32_t kSignaled = 1u << 1;
inline constexpr std::uint32_t kSolicited = 1u << 2;
inline constexpr std::uint32_t kInline = 1u << 3;
}  // namespace send_flags

namespace wc_flags {  // IBV_WC_* flags of a completion
inline constexpr std::uint32_t kGrh = 1u << 0;
inline constexpr std::uint32_t kWithImm = 1u << 1;
inline constexpr std::uint32_t kWithInv = 1u << 3;
}  // namespace wc_flags

// IBV_QP_*: which attributes a modify_qp() sets or a query_qp() asks for.
namespace qp_attr {
inline constexpr std::uint32_t kState = 1u << 0;
inline constexpr std::uint32_t kCurState = 1u << 1;
inline constexpr std::uint32_t kAccessFlags = 1u << 3;
inline constexpr std::uint32_t kPkeyIndex = 1u << 4;
inline constexpr std::uint32_t kPort = 1u << 5;
inline constexpr std::uint32_t kQkey = 1u << 6;
inline constexpr std::uint32_t kAv = 1u << 7;  // the peer's address
inline constexpr std::uint32_t kPathMtu = 1u << 8;
inline constexpr std::uint32_t kTimeout = 1u << 9;
inline constexpr std::uint32_t kRetryCnt = 1u << 10;
inline constexpr std::uint32_t kRnrRetry = 1u << 11;
inline constexpr std::uint32_t kRqPsn = 1u << 12;
inline constexpr std::uint32_t kMaxQpRdAtomic = 1u << 13;
inline constexpr std::uint32_t kMinRnrTimer = 1u << 15;
inline constexpr std::uint32_t kSqPsn = 1u << 16;
inline constexpr std::uint32_t kMaxDestRdAtomic = 1u << 17;
inline constexpr std::uint32_t kCap = 1u << 19;
inline constexpr std::uint32_t kDestQpn = 1u << 20;
}  // namespace qp_attr

// ---------------------------------------------------------------------------------------
// Names, as libibverbs' *_str() functions give them (ibv_wc_status_str, ibv_event_type_str)
// or, where it has none, as verbs.h spells the constant without its prefix.

constexpr std::string_view name(WcStatus status) {
  constexpr std::array<std::string_view, 24> kNames = {
      "success", "local length error", "local QP operation error",
      "local EE context operation error", "local protection error", "Work Request Flushed Error",
      "memory management operation error", "bad response error", "local access error",
      "remote invalid request error", "remote access error", "remote operation error",
      "transport retry counter exceeded", "RNR retry counter exceeded", "local RDD violation error",
      "remote invalid RD request", "aborted error", "invalid EE context number",
      "invalid EE context state", "fatal error", "response timeout error", "general error",
      "TM error", "TM software rendezvous"};
  const auto i = static_cast<std::uint32_t>(status);
  return i < kNames.size() ? kNames[i] : "unknown";
}

constexpr std::string_view name(WcOpcode opcode) {
  switch (opcode) {
    case WcOpcode::Send: return "SEND";
    case WcOpcode::RdmaWrite: return "RDMA_WRITE";
    case WcOpcode::RdmaRead: return "RDMA_READ";
    case WcOpcode::CompSwap: return "COMP_SWAP";
    case WcOpcode::FetchAdd: return "FETCH_ADD";
    case WcOpcode::BindMw: return "BIND_MW";
    case WcOpcode::LocalInv: return "LOCAL_INV";
    case WcOpcode::Tso: return "TSO";
    case WcOpcode::Flush: return "FLUSH";
    case WcOpcode::AtomicWrite: return "ATOMIC_WRITE";
    case WcOpcode::Recv: return "RECV";
    case WcOpcode::RecvRdmaWithImm: return "RECV_RDMA_WITH_IMM";
  }
  return "unknown";
}

constexpr std::string_view name(QpState state) {
  constexpr std::array<std::string_view, 7> kNames = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  const auto i = static_cast<std::uint32_t>(state);
  return i < kNames.size() ? kNames[i] : "unknown";
}

constexpr std::string_view name(EventType type) {
  constexpr std::array<std::string_view, 20> kNames = {
      "CQ error", "local work queue catastrophic error", "invalid request local work queue error",
      "local access violation work queue error", "communication established", "send queue drained",
      "path migrated", "path migration request error", "local catastrophic error", "port active",
      "port error", "LID change", "P_Key change", "SM change", "SRQ catastrophic error",
      "SRQ limit reached", "last WQE reached", "client reregistration", "GID table change",
      "WQ fatal"};
  const auto i = static_cast<std::uint32_t>(type);
  return i < kNames.size() ? kNames[i] : "unknown";
}

constexpr bool is_receive(WcOpcode opcode) { return (static_cast<std::uint32_t>(opcode) & 0x80u) != 0; }

// ---------------------------------------------------------------------------------------
// The work-request opcode table

// The transports that carry an operation (the IBA OpCode table: UD has only SEND; UC has
// SEND and WRITE but no READ, atomics or SEND with invalidate).
namespace transports {
inline constexpr std::uint8_t kRc = 1u << 0;
inline constexpr std::uint8_t kUc = 1u << 1;
inline constexpr std::uint8_t kUd = 1u << 2;
}  // namespace transports

struct WrOpcodeInfo {
  std::string_view name;       // the IBV_WR_ constant without its prefix
  bool implemented = false;    // the engine carries it; any other WR is refused at post time
  WcOpcode completion = WcOpcode::Send;  // the opcode of its send completion
  std::uint8_t transports = 0;           // transports:: bits
  // Its RC request opcodes by place in the message (a UC packet is the RC opcode with the
  // transport bits 001; a READ request or an atomic is one packet: `only`), and its UD opcode.
  Opcode first{}, middle{}, last{}, only{}, ud_only{};
  // What the request packets carry, read from the BTH opcode table.
  bool reth = false;        // the first (or only) packet carries a RETH: a remote address
  bool atomic_eth = false;  // an AtomicETH
  bool imm = false;         // the last packet carries ImmDt
  bool ieth = false;        // the last packet carries an IETH (the R_Key to invalidate)
  bool read = false;        // the responder answers with data (READ responses)
  bool atomic = false;      // the responder answers with the original value (atomic ACK)
  // IBA 1.5 Annex A19: FLUSH and ATOMIC_WRITE. The responder answers with an RDMA READ
  // response of no data (rxe: send_read_response_ack), and keeps a responder resource for
  // the request, so that a duplicate is answered again without being executed again.
  bool flush = false;
  bool atomic_write = false;
  // A local operation (IBA 10.6.7 memory windows, 10.6.8 invalidation): the requester
  // executes it in send-queue order against the MR table; nothing goes on the wire.
  bool local = false;
  // Its IBV_QP_EX_WITH_* bit (ibv_qp_init_attr_ex.send_ops_flags): 1 << opcode up to TSO,
  // then FLUSH 1 << 11 and ATOMIC_WRITE 1 << 12.
  std::uint64_t send_ops_flag = 0;

  // The operations that keep a responder resource while outstanding (IBA ch. 9
  // max_rd_atomic) and whose local buffer the responder's answer fills.
  constexpr bool needs_response_data() const { return read || atomic; }
  // Answered by an empty READ response (A19): no data, but a responder resource all the same.
  constexpr bool empty_read_response() const { return flush || atomic_write; }
  // What counts against max_rd_atomic at the requester (and max_dest_rd_atomic at the peer).
  constexpr bool holds_responder_resource() const { return needs_response_data() || empty_read_response(); }
  constexpr bool allowed_on(QpType type) const {
    switch (type) {
      case QpType::Rc: return (transports & transports::kRc) != 0;
      case QpType::Uc: return (transports & transports::kUc) != 0;
      case QpType::Ud: return (transports & transports::kUd) != 0;
    }
    return false;
  }
  // The request opcode of one packet of this operation on a QP of `type`.
  constexpr Opcode request_opcode(QpType type, bool first_packet, bool last_packet) const {
    if (type == QpType::Ud) return ud_only;
    const Opcode rc = first_packet && last_packet ? only : first_packet ? first : last_packet ? last : middle;
    if (type == QpType::Uc) return static_cast<Opcode>(static_cast<std::uint8_t>(rc) | 0x20u);
    return rc;
  }
};

namespace detail {

constexpr WrOpcodeInfo wr_row(std::string_view name, bool implemented, WcOpcode completion,
                              std::uint8_t transports, Opcode first, Opcode middle, Opcode last,
                              Opcode only, Opcode ud_only = Opcode::RcSendFirst) {
  WrOpcodeInfo info{name, implemented, completion, transports, first, middle, last, only, ud_only};
  const OpcodeFlags begin = opcode_info(only).flags;  // the only packet has every header
  info.reth = begin.has(OpcodeFlags::kReth);
  info.atomic_eth = begin.has(OpcodeFlags::kAtomicEth);
  info.imm = begin.has(OpcodeFlags::kImm);
  info.ieth = begin.has(OpcodeFlags::kIeth);
  info.read = begin.has(OpcodeFlags::kReadRequest);
  info.atomic = begin.has(OpcodeFlags::kAtomic);
  info.flush = begin.has(OpcodeFlags::kFlush);
  info.atomic_write = begin.has(OpcodeFlags::kAtomicWrite);
  return info;
}

// A single-packet request: every place in the message is the same opcode.
constexpr WrOpcodeInfo wr_single(std::string_view name, bool implemented, WcOpcode completion, Opcode op) {
  return wr_row(name, implemented, completion, transports::kRc, op, op, op, op);
}

// A local operation: no request opcodes (a row with `local` is never asked for one).
constexpr WrOpcodeInfo wr_local(std::string_view name, WcOpcode completion, std::uint8_t transports) {
  WrOpcodeInfo info{name, true, completion, transports};
  info.local = true;
  return info;
}

// The rows in IBV_WR_* order; a name with no row is an opcode verbs.h does not define.
constexpr std::array<WrOpcodeInfo, 16> make_wr_opcodes() {
  using O = Opcode;
  constexpr std::uint8_t kAll = transports::kRc | transports::kUc | transports::kUd;
  constexpr std::uint8_t kConnected = transports::kRc | transports::kUc;
  std::array<WrOpcodeInfo, 16> t{};
  // Rows 0..10 first, so that each gets its send_ops_flag below.
  t[0] = wr_row("RDMA_WRITE", true, WcOpcode::RdmaWrite, kConnected,
                O::RcWriteFirst, O::RcWriteMiddle, O::RcWriteLast, O::RcWriteOnly);
  t[1] = wr_row("RDMA_WRITE_WITH_IMM", true, WcOpcode::RdmaWrite, kConnected,
                O::RcWriteFirst, O::RcWriteMiddle, O::RcWriteLastImm, O::RcWriteOnlyImm);
  t[2] = wr_row("SEND", true, WcOpcode::Send, kAll,
                O::RcSendFirst, O::RcSendMiddle, O::RcSendLast, O::RcSendOnly, O::UdSendOnly);
  t[3] = wr_row("SEND_WITH_IMM", true, WcOpcode::Send, kAll,
                O::RcSendFirst, O::RcSendMiddle, O::RcSendLastImm, O::RcSendOnlyImm, O::UdSendOnlyImm);
  t[4] = wr_single("RDMA_READ", true, WcOpcode::RdmaRead, O::RcReadRequest);
  t[5] = wr_single("ATOMIC_CMP_AND_SWP", true, WcOpcode::CompSwap, O::RcCompareSwap);
  t[6] = wr_single("ATOMIC_FETCH_AND_ADD", true, WcOpcode::FetchAdd, O::RcFetchAdd);
  // Local operations, on RC and UC as rxe allows them (rxe_opcode.c WR_LOCAL_OP_MASK).
  t[7] = wr_local("LOCAL_INV", WcOpcode::LocalInv, kConnected);
  t[8] = wr_local("BIND_MW", WcOpcode::BindMw, kConnected);
  t[9] = wr_row("SEND_WITH_INV", true, WcOpcode::Send, transports::kRc,
                O::RcSendFirst, O::RcSendMiddle, O::RcSendLastInv, O::RcSendOnlyInv);
  t[10].name = "TSO";
  t[10].completion = WcOpcode::Tso;
  t[11].name = "DRIVER1";
  t[14] = wr_single("FLUSH", true, WcOpcode::Flush, O::RcFlush);
  t[15] = wr_single("ATOMIC_WRITE", true, WcOpcode::AtomicWrite, O::RcAtomicWrite);
  for (std::size_t i = 0; i <= 10; ++i) t[i].send_ops_flag = std::uint64_t{1} << i;
  t[14].send_ops_flag = std::uint64_t{1} << 11;
  t[15].send_ops_flag = std::uint64_t{1} << 12;
  return t;
}

inline constexpr std::array<WrOpcodeInfo, 16> kWrOpcodes = make_wr_opcodes();
inline constexpr WrOpcodeInfo kUnknownWrOpcode{"unknown"};

}  // namespace detail

// The row of a work-request opcode; any value, even one no verbs.h defines, has one.
constexpr const WrOpcodeInfo& wr_opcode_info(WrOpcode op) {
  const auto i = static_cast<std::uint32_t>(op);
  if (i >= detail::kWrOpcodes.size() || detail::kWrOpcodes[i].name.empty()) return detail::kUnknownWrOpcode;
  return detail::kWrOpcodes[i];
}
constexpr std::string_view name(WrOpcode op) { return wr_opcode_info(op).name; }

// The IBV_QP_EX_WITH_* bits of every operation the engine implements.
constexpr std::uint64_t implemented_send_ops_flags() {
  std::uint64_t flags = 0;
  for (const WrOpcodeInfo& row : detail::kWrOpcodes)
    if (row.implemented) flags |= row.send_ops_flag;
  return flags;
}

namespace detail {
// Every row agrees with the BTH opcode table about the transports it claims: a UD row has a
// UD opcode, a UC row's opcodes exist on UC, and no row claims a transport it has no opcode
// for. A row that skipped this would put, say, RC SEND_FIRST on a UD QP.
constexpr bool rows_agree_with_opcode_table() {
  for (const WrOpcodeInfo& row : kWrOpcodes) {
    if (row.local) continue;  // nothing on the wire
    if (row.allowed_on(QpType::Ud) && !opcode_info(row.ud_only).flags.has(OpcodeFlags::kUd)) return false;
    if (row.allowed_on(QpType::Uc)) {
      for (const Opcode rc : {row.first, row.middle, row.last, row.only})
        if (!opcode_info(static_cast<Opcode>(static_cast<std::uint8_t>(rc) | 0x20u)).flags.has(OpcodeFlags::kUc)) return false;
    }
    if (row.allowed_on(QpType::Rc) && !opcode_info(row.only).flags.has(OpcodeFlags::kRc)) return false;
  }
  return true;
}
static_assert(rows_agree_with_opcode_table());
}  // namespace detail

// The table against the BTH opcode table and verbs.h, checked by the compiler.
static_assert(wr_opcode_info(WrOpcode::RdmaWrite).reth && !wr_opcode_info(WrOpcode::Send).reth);
static_assert(wr_opcode_info(WrOpcode::RdmaRead).reth && wr_opcode_info(WrOpcode::RdmaRead).read);
static_assert(wr_opcode_info(WrOpcode::AtomicCmpSwp).atomic_eth && wr_opcode_info(WrOpcode::AtomicFetchAdd).atomic);
static_assert(wr_opcode_info(WrOpcode::SendWithImm).imm && wr_opcode_info(WrOpcode::RdmaWriteWithImm).imm);
static_assert(wr_opcode_info(WrOpcode::SendWithInv).ieth && !wr_opcode_info(WrOpcode::SendWithInv).imm);
static_assert(wr_opcode_info(WrOpcode::Send).request_opcode(QpType::Uc, true, true) == Opcode::UcSendOnly);
static_assert(wr_opcode_info(WrOpcode::RdmaWriteWithImm).request_opcode(QpType::Uc, false, true) == Opcode::UcWriteLastImm);
static_assert(wr_opcode_info(WrOpcode::SendWithImm).request_opcode(QpType::Ud, true, true) == Opcode::UdSendOnlyImm);
static_assert(!wr_opcode_info(WrOpcode::RdmaRead).allowed_on(QpType::Uc));
static_assert(!wr_opcode_info(WrOpcode::SendWithInv).allowed_on(QpType::Uc));
static_assert(!wr_opcode_info(static_cast<WrOpcode>(200)).implemented);
static_assert(wr_opcode_info(WrOpcode::Flush).flush && wr_opcode_info(WrOpcode::Flush).reth &&
              !wr_opcode_info(WrOpcode::Flush).allowed_on(QpType::Uc));
static_assert(wr_opcode_info(WrOpcode::AtomicWrite).atomic_write && wr_opcode_info(WrOpcode::AtomicWrite).reth &&
              !wr_opcode_info(WrOpcode::AtomicWrite).atomic_eth && !wr_opcode_info(WrOpcode::AtomicWrite).needs_response_data());
static_assert(wr_opcode_info(WrOpcode::AtomicWrite).holds_responder_resource());
static_assert(flush::feth_bits(flush::kGlobal, flush::kLevelMr) == 0x11);
static_assert(wr_opcode_info(WrOpcode::BindMw).local && wr_opcode_info(WrOpcode::LocalInv).local);
static_assert(!wr_opcode_info(WrOpcode::BindMw).allowed_on(QpType::Ud) && !wr_opcode_info(WrOpcode::Send).local);

}  // namespace rrdma::rocev2
