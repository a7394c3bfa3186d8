// The shared-memory ABI: byte positions of WQE and CQE fields, the validation the daemon runs
// on every WQE it copies out of a ring (each refusal, and random garbage), and the
// conversions to and from the engine's forms.
#include <catch2/catch.hpp>
#include <infiniband/verbs.h>

#include <endian.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <random>
#include <vector>

#include "verbs/contract/abi.h"
#include "verbs/device/wqe_translate.h"
#include "verbs/contract/ring.h"

using namespace rrdma;
using namespace rrdma::verbs;
using rocev2::QpType;
using rocev2::WrOpcode;

// The ABI mirrors libibverbs: our CQE is struct ibv_wc byte for byte, and every code that
// travels in a WQE or CQE has the value verbs.h gives it.
static_assert(sizeof(Cqe) == sizeof(ibv_wc));
static_assert(offsetof(Cqe, wr_id) == offsetof(ibv_wc, wr_id));
static_assert(offsetof(Cqe, status) == offsetof(ibv_wc, status));
static_assert(offsetof(Cqe, opcode) == offsetof(ibv_wc, opcode));
static_assert(offsetof(Cqe, vendor_err) == offsetof(ibv_wc, vendor_err));
static_assert(offsetof(Cqe, byte_len) == offsetof(ibv_wc, byte_len));
static_assert(offsetof(Cqe, imm_data) == offsetof(ibv_wc, imm_data));
static_assert(offsetof(Cqe, imm_data) == offsetof(ibv_wc, invalidated_rkey));
static_assert(offsetof(Cqe, qp_num) == offsetof(ibv_wc, qp_num));
static_assert(offsetof(Cqe, src_qp) == offsetof(ibv_wc, src_qp));
static_assert(offsetof(Cqe, wc_flags) == offsetof(ibv_wc, wc_flags));
static_assert(offsetof(Cqe, pkey_index) == offsetof(ibv_wc, pkey_index));
static_assert(offsetof(Cqe, slid) == offsetof(ibv_wc, slid));
static_assert(offsetof(Cqe, sl) == offsetof(ibv_wc, sl));
static_assert(offsetof(Cqe, dlid_path_bits) == offsetof(ibv_wc, dlid_path_bits));

static_assert(static_cast<int>(WrOpcode::RdmaWrite) == IBV_WR_RDMA_WRITE);
static_assert(static_cast<int>(WrOpcode::RdmaWriteWithImm) == IBV_WR_RDMA_WRITE_WITH_IMM);
static_assert(static_cast<int>(WrOpcode::Send) == IBV_WR_SEND);
static_assert(static_cast<int>(WrOpcode::SendWithImm) == IBV_WR_SEND_WITH_IMM);
static_assert(static_cast<int>(WrOpcode::RdmaRead) == IBV_WR_RDMA_READ);
static_assert(static_cast<int>(WrOpcode::AtomicCmpSwp) == IBV_WR_ATOMIC_CMP_AND_SWP);
static_assert(static_cast<int>(WrOpcode::AtomicFetchAdd) == IBV_WR_ATOMIC_FETCH_AND_ADD);
static_assert(static_cast<int>(WrOpcode::SendWithInv) == IBV_WR_SEND_WITH_INV);
static_assert(rocev2::send_flags::kFence == IBV_SEND_FENCE);
static_assert(rocev2::send_flags::kSignaled == IBV_SEND_SIGNALED);
static_assert(rocev2::send_flags::kSolicited == IBV_SEND_SOLICITED);
static_assert(rocev2::send_flags::kInline == IBV_SEND_INLINE);
static_assert(static_cast<int>(rocev2::WcOpcode::Send) == IBV_WC_SEND);
static_assert(static_cast<int>(rocev2::WcOpcode::RdmaWrite) == IBV_WC_RDMA_WRITE);
static_assert(static_cast<int>(rocev2::WcOpcode::RdmaRead) == IBV_WC_RDMA_READ);
static_assert(static_cast<int>(rocev2::WcOpcode::CompSwap) == IBV_WC_COMP_SWAP);
static_assert(static_cast<int>(rocev2::WcOpcode::FetchAdd) == IBV_WC_FETCH_ADD);
static_assert(static_cast<int>(rocev2::WcOpcode::Recv) == IBV_WC_RECV);
static_assert(static_cast<int>(rocev2::WcOpcode::RecvRdmaWithImm) == IBV_WC_RECV_RDMA_WITH_IMM);
static_assert(static_cast<int>(rocev2::WcStatus::Success) == IBV_WC_SUCCESS);
static_assert(static_cast<int>(rocev2::WcStatus::LocLenErr) == IBV_WC_LOC_LEN_ERR);
static_assert(static_cast<int>(rocev2::WcStatus::LocQpOpErr) == IBV_WC_LOC_QP_OP_ERR);
static_assert(static_cast<int>(rocev2::WcStatus::LocProtErr) == IBV_WC_LOC_PROT_ERR);
static_assert(static_cast<int>(rocev2::WcStatus::WrFlushErr) == IBV_WC_WR_FLUSH_ERR);
static_assert(static_cast<int>(rocev2::WcStatus::BadRespErr) == IBV_WC_BAD_RESP_ERR);
static_assert(static_cast<int>(rocev2::WcStatus::LocAccessErr) == IBV_WC_LOC_ACCESS_ERR);
static_assert(static_cast<int>(rocev2::WcStatus::RemInvReqErr) == IBV_WC_REM_INV_REQ_ERR);
static_assert(static_cast<int>(rocev2::WcStatus::RemAccessErr) == IBV_WC_REM_ACCESS_ERR);
static_assert(static_cast<int>(rocev2::WcStatus::RemOpErr) == IBV_WC_REM_OP_ERR);
static_assert(static_cast<int>(rocev2::WcStatus::RetryExcErr) == IBV_WC_RETRY_EXC_ERR);
static_assert(static_cast<int>(rocev2::WcStatus::RnrRetryExcErr) == IBV_WC_RNR_RETRY_EXC_ERR);
static_assert(static_cast<int>(rocev2::WcStatus::FatalErr) == IBV_WC_FATAL_ERR);
static_assert(static_cast<int>(rocev2::WcStatus::GeneralErr) == IBV_WC_GENERAL_ERR);
static_assert(rocev2::wc_flags::kGrh == IBV_WC_GRH);
static_assert(rocev2::wc_flags::kWithImm == IBV_WC_WITH_IMM);
static_assert(rocev2::wc_flags::kWithInv == IBV_WC_WITH_INV);
// The codes rocev2/verbs_codes.h names beyond what the engine implements.
static_assert(static_cast<int>(WrOpcode::LocalInv) == IBV_WR_LOCAL_INV);
static_assert(static_cast<int>(WrOpcode::BindMw) == IBV_WR_BIND_MW);
static_assert(static_cast<int>(WrOpcode::Tso) == IBV_WR_TSO);
static_assert(static_cast<int>(WrOpcode::Driver1) == IBV_WR_DRIVER1);
static_assert(static_cast<int>(WrOpcode::AtomicWrite) == IBV_WR_ATOMIC_WRITE);
static_assert(static_cast<int>(rocev2::WcOpcode::BindMw) == IBV_WC_BIND_MW);
static_assert(static_cast<int>(rocev2::WcOpcode::LocalInv) == IBV_WC_LOCAL_INV);
static_assert(static_cast<int>(rocev2::WcOpcode::Tso) == IBV_WC_TSO);
static_assert(static_cast<int>(rocev2::WcOpcode::AtomicWrite) == IBV_WC_ATOMIC_WRITE);
static_assert(static_cast<int>(rocev2::WcStatus::TmRndvIncomplete) == IBV_WC_TM_RNDV_INCOMPLETE);
static_assert(static_cast<int>(rocev2::EventType::WqFatal) == IBV_EVENT_WQ_FATAL);
static_assert(static_cast<int>(rocev2::EventType::QpLastWqeReached) == IBV_EVENT_QP_LAST_WQE_REACHED);
static_assert(static_cast<int>(rocev2::QpState::Err) == IBV_QPS_ERR);
static_assert(static_cast<int>(rocev2::QpType::Ud) == IBV_QPT_UD);
static_assert(rocev2::qp_attr::kDestQpn == IBV_QP_DEST_QPN && rocev2::qp_attr::kCap == IBV_QP_CAP);
static_assert(rocev2::access::kRemoteAtomic == IBV_ACCESS_REMOTE_ATOMIC);

namespace {

template <typename T>
std::vector<std::uint8_t> bytes_of(const T& value) {
  std::vector<std::uint8_t> out(sizeof(T));
  std::memcpy(out.data(), &value, sizeof(T));
  return out;
}

// Our ABI is host order on little-endian x86-64 / arm64 Linux.
std::uint64_t load_le(const std::vector<std::uint8_t>& b, std::size_t at, std::size_t width) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < width; ++i) v |= std::uint64_t{b.at(at + i)} << (8 * i);
  return v;
}

SendWqe send_wqe(WrOpcode opcode, std::uint32_t flags = 0) {
  SendWqe w{};
  w.wr_id = 0x1122334455667788;
  w.opcode = static_cast<std::uint8_t>(opcode);
  w.send_flags = flags;
  w.num_sge = 1;
  w.sge[0] = {0x7F00'0000'1000, 8, 0x1234};
  return w;
}

}  // namespace

TEST_CASE("abi: every send WQE field lands at its documented byte offset") {
  SendWqe w{};
  w.wr_id = 0x0102030405060708;
  w.send_flags = 0x0A0B0C0D;
  w.opcode = 0xEE;
  w.num_sge = 3;
  w.inline_length = 0xBEEF;
  w.remote_addr = 0x1111222233334444;
  w.rkey = 0x55667788;
  w.imm_data = 0x99AABBCC;
  w.compare_add = 0xDDDDEEEEFFFF0000;
  w.swap = 0x0000FFFFEEEEDDDD;
  w.invalidate_rkey = 0x13579BDF;
  w.ah_handle = 0x2468ACE0;
  w.remote_qpn = 0x00ABCDEF;
  w.remote_qkey = 0x80010002;
  w.sge[15] = {0xCAFEBABE00000000, 0x10000, 0x4242};
  w.inline_data[191] = 0x77;
  const auto b = bytes_of(w);
  CHECK(load_le(b, 0, 8) == 0x0102030405060708);
  CHECK(load_le(b, 8, 4) == 0x0A0B0C0D);
  CHECK(b[12] == 0xEE);
  CHECK(b[13] == 3);
  CHECK(load_le(b, 14, 2) == 0xBEEF);
  CHECK(load_le(b, 16, 8) == 0x1111222233334444);
  CHECK(load_le(b, 24, 4) == 0x55667788);
  CHECK(load_le(b, 28, 4) == 0x99AABBCC);
  CHECK(load_le(b, 32, 8) == 0xDDDDEEEEFFFF0000);
  CHECK(load_le(b, 40, 8) == 0x0000FFFFEEEEDDDD);
  CHECK(load_le(b, 48, 4) == 0x13579BDF);
  CHECK(load_le(b, 52, 4) == 0x2468ACE0);
  CHECK(load_le(b, 56, 4) == 0x00ABCDEF);
  CHECK(load_le(b, 60, 4) == 0x80010002);
  CHECK(load_le(b, 64 + 15 * 16, 8) == 0xCAFEBABE00000000);
  CHECK(load_le(b, 64 + 15 * 16 + 8, 4) == 0x10000);
  CHECK(load_le(b, 64 + 15 * 16 + 12, 4) == 0x4242);
  CHECK(b[511] == 0x77);
}

TEST_CASE("abi: the CQE has struct ibv_wc's layout, filled from an engine completion") {
  rocev2::Completion c;
  c.qpn = rocev2::Qpn(0x000123);
  c.wr_id = 0xFEEDFACECAFEBEEF;
  c.status = rocev2::WcStatus::RemAccessErr;
  c.opcode = rocev2::WcOpcode::RecvRdmaWithImm;
  c.byte_len = 4096;
  c.flags = rocev2::wc_flags::kWithImm | rocev2::wc_flags::kGrh;
  c.imm_data = 0xA1B2C3D4;
  c.src_qp = rocev2::Qpn(0x000456);
  const auto b = bytes_of(to_cqe(c));
  REQUIRE(b.size() == 48);
  CHECK(load_le(b, 0, 8) == 0xFEEDFACECAFEBEEF);
  CHECK(load_le(b, 8, 4) == 10);    // IBV_WC_REM_ACCESS_ERR
  CHECK(load_le(b, 12, 4) == 129);  // IBV_WC_RECV_RDMA_WITH_IMM
  CHECK(load_le(b, 16, 4) == 0);
  CHECK(load_le(b, 20, 4) == 4096);
  // imm_data is a __be32: the immediate's bytes in network order, as they were on the wire.
  CHECK(std::vector<std::uint8_t>(b.begin() + 24, b.begin() + 28) == std::vector<std::uint8_t>{0xA1, 0xB2, 0xC3, 0xD4});
  CHECK(load_le(b, 28, 4) == 0x123);
  CHECK(load_le(b, 32, 4) == 0x456);
  CHECK(load_le(b, 36, 4) == 3);    // IBV_WC_GRH | IBV_WC_WITH_IMM
  CHECK(load_le(b, 40, 4) == 0);    // pkey_index, slid: none on RoCE
  CHECK(b[44] == 2);                // sl: with a GRH, ConnectX's RoCE packet type IPv4 (UCX reads it)
  CHECK(b[45] == 0);                // dlid_path_bits

  // Read back through the real struct ibv_wc, as the client's poll_cq will.
  ibv_wc wc{};
  std::memcpy(&wc, b.data(), sizeof(wc));
  CHECK(wc.wr_id == 0xFEEDFACECAFEBEEF);
  CHECK(wc.status == IBV_WC_REM_ACCESS_ERR);
  CHECK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
  CHECK(wc.byte_len == 4096);
  CHECK(be32toh(wc.imm_data) == 0xA1B2C3D4);
  CHECK(wc.qp_num == 0x123);
  CHECK(wc.src_qp == 0x456);
  CHECK(wc.wc_flags == (IBV_WC_GRH | IBV_WC_WITH_IMM));
  CHECK(wc.sl == 2);

  // Without a GRH (RC, UC) there is no packet type to report.
  c.flags = rocev2::wc_flags::kWithImm;
  CHECK(to_cqe(c).sl == 0);

  // With IBV_WC_WITH_INV the same word carries the invalidated R_Key (ibv_wc's union).
  c.flags = rocev2::wc_flags::kWithInv;
  c.invalidated_rkey = rocev2::Rkey(0x0BADF00D);
  CHECK(to_cqe(c).imm_data == 0x0BADF00D);
}

TEST_CASE("abi: valid send WQEs pass with their message length, per QP type") {
  SendWqe w = send_wqe(WrOpcode::Send, rocev2::send_flags::kSignaled | rocev2::send_flags::kSolicited);
  w.num_sge = 3;
  w.sge[1] = {0x2000, 100, 1};
  w.sge[2] = {0x3000, 0, 1};  // zero-length SGEs are legal
  for (QpType t : {QpType::Rc, QpType::Uc, QpType::Ud}) {
    const WqeCheck check = check_send_wqe(w, t);
    CHECK(check.error == WqeError::None);
    CHECK(check.length == 108);
  }
  CHECK(check_send_wqe(send_wqe(WrOpcode::RdmaWriteWithImm), QpType::Uc).error == WqeError::None);
  CHECK(check_send_wqe(send_wqe(WrOpcode::RdmaRead), QpType::Rc).error == WqeError::None);
  CHECK(check_send_wqe(send_wqe(WrOpcode::SendWithInv), QpType::Rc).error == WqeError::None);
  CHECK(check_send_wqe(send_wqe(WrOpcode::AtomicFetchAdd), QpType::Rc).error == WqeError::None);

  // IBA 1.5 A19: operands in the WQE, no SGEs, never inline; only what the FETH cannot carry
  // is refused here (the responder NAKs the rest as rxe does).
  SendWqe atomic_write = send_wqe(WrOpcode::AtomicWrite);
  atomic_write.num_sge = 0;
  atomic_write.remote_addr = 0x1004;  // misaligned: the responder's to refuse
  CHECK(check_send_wqe(atomic_write, QpType::Rc).error == WqeError::None);
  CHECK(check_send_wqe(atomic_write, QpType::Rc).length == 8);
  CHECK(check_send_wqe(atomic_write, QpType::Uc).error == WqeError::OpcodeNotForQpType);
  atomic_write.num_sge = 1;
  CHECK(check_send_wqe(atomic_write, QpType::Rc).error == WqeError::SgesNotAllowed);
  SendWqe flush = send_wqe(WrOpcode::Flush);
  flush.num_sge = 0;
  flush.compare_add = 4096;
  flush.swap = flush_fields(1, 1);
  CHECK(check_send_wqe(flush, QpType::Rc).error == WqeError::None);
  flush.send_flags |= rocev2::send_flags::kInline;
  CHECK(check_send_wqe(flush, QpType::Rc).error == WqeError::InlineNotAllowed);
  flush.send_flags &= ~rocev2::send_flags::kInline;
  flush.swap = flush_fields(0x10, 0);
  CHECK(check_send_wqe(flush, QpType::Rc).error == WqeError::FlushFieldsTooWide);
  flush.swap = flush_fields(1, 4);
  CHECK(check_send_wqe(flush, QpType::Rc).error == WqeError::FlushFieldsTooWide);
  flush.swap = flush_fields(1, 0);
  flush.compare_add = kMaxMessageSize + 1;
  CHECK(check_send_wqe(flush, QpType::Rc).error == WqeError::MessageTooLong);

  SendWqe zero = send_wqe(WrOpcode::Send);
  zero.num_sge = 0;
  CHECK(check_send_wqe(zero, QpType::Rc).length == 0);
  CHECK(check_send_wqe(zero, QpType::Rc).error == WqeError::None);

  SendWqe biggest = send_wqe(WrOpcode::RdmaWrite);
  biggest.sge[0].length = 0x8000'0000;
  CHECK(check_send_wqe(biggest, QpType::Rc).error == WqeError::None);
  CHECK(check_send_wqe(biggest, QpType::Rc).length == kMaxMessageSize);

  SendWqe in = send_wqe(WrOpcode::Send, rocev2::send_flags::kInline);
  in.num_sge = 200;  // ignored with inline data
  in.inline_length = kMaxInlineData;
  CHECK(check_send_wqe(in, QpType::Ud).error == WqeError::None);
  CHECK(check_send_wqe(in, QpType::Ud).length == kMaxInlineData);
}

TEST_CASE("abi: each malformed send WQE is refused with its reason") {
  SendWqe w = send_wqe(WrOpcode::Send);

  SECTION("opcodes we do not implement, or that do not exist") {
    for (int op : {10, 11, 0x80, 0xFF}) {
      w.opcode = static_cast<std::uint8_t>(op);
      CHECK(check_send_wqe(w, QpType::Rc).error == WqeError::UnknownOpcode);
    }
  }
  SECTION("operations the transport does not carry") {
    CHECK(check_send_wqe(send_wqe(WrOpcode::RdmaWrite), QpType::Ud).error == WqeError::OpcodeNotForQpType);
    CHECK(check_send_wqe(send_wqe(WrOpcode::RdmaRead), QpType::Uc).error == WqeError::OpcodeNotForQpType);
    CHECK(check_send_wqe(send_wqe(WrOpcode::AtomicCmpSwp), QpType::Uc).error == WqeError::OpcodeNotForQpType);
    CHECK(check_send_wqe(send_wqe(WrOpcode::SendWithInv), QpType::Uc).error == WqeError::OpcodeNotForQpType);
    CHECK(check_send_wqe(send_wqe(WrOpcode::SendWithInv), QpType::Ud).error == WqeError::OpcodeNotForQpType);
    w.opcode = 2;
    CHECK(check_send_wqe(w, static_cast<QpType>(9)).error == WqeError::OpcodeNotForQpType);
  }
  SECTION("unknown flags (IBV_SEND_IP_CSUM and above)") {
    w.send_flags = 1u << 4;
    CHECK(check_send_wqe(w, QpType::Rc).error == WqeError::UnknownSendFlags);
    w.send_flags = 0x8000'0000;
    CHECK(check_send_wqe(w, QpType::Rc).error == WqeError::UnknownSendFlags);
  }
  SECTION("SGE count past the array") {
    w.num_sge = kMaxSge + 1;
    CHECK(check_send_wqe(w, QpType::Rc).error == WqeError::TooManySges);
    w.num_sge = 0xFF;
    CHECK(check_send_wqe(w, QpType::Rc).error == WqeError::TooManySges);
  }
  SECTION("lengths that sum past the maximum message, and would wrap 32 bits") {
    w.num_sge = kMaxSge;
    for (auto& s : w.sge) s.length = 0xFFFF'FFFF;
    CHECK(check_send_wqe(w, QpType::Rc).error == WqeError::MessageTooLong);
    w.num_sge = 2;
    w.sge[0].length = 0x8000'0000;
    w.sge[1].length = 1;
    CHECK(check_send_wqe(w, QpType::Rc).error == WqeError::MessageTooLong);
  }
  SECTION("inline data too long, or on an operation that carries none") {
    w.send_flags = rocev2::send_flags::kInline;
    w.inline_length = kMaxInlineData + 1;
    CHECK(check_send_wqe(w, QpType::Rc).error == WqeError::InlineTooLong);
    SendWqe read = send_wqe(WrOpcode::RdmaRead, rocev2::send_flags::kInline);
    CHECK(check_send_wqe(read, QpType::Rc).error == WqeError::InlineNotAllowed);
    SendWqe cas = send_wqe(WrOpcode::AtomicCmpSwp, rocev2::send_flags::kInline);
    CHECK(check_send_wqe(cas, QpType::Rc).error == WqeError::InlineNotAllowed);
  }
  SECTION("atomics: one 8-byte SGE, an aligned remote word") {
    SendWqe a = send_wqe(WrOpcode::AtomicCmpSwp);
    a.sge[0].length = 4;
    CHECK(check_send_wqe(a, QpType::Rc).error == WqeError::AtomicNotOneWord);
    a.sge[0].length = 8;
    a.num_sge = 2;
    a.sge[1] = {0x5000, 0, 1};
    CHECK(check_send_wqe(a, QpType::Rc).error == WqeError::AtomicNotOneWord);
    a.num_sge = 1;
    a.remote_addr = 0x1004;
    CHECK(check_send_wqe(a, QpType::Rc).error == WqeError::AtomicMisaligned);
  }
}

TEST_CASE("abi: receive WQEs") {
  RecvWqe r{};
  r.wr_id = 7;
  r.num_sge = 2;
  r.sge[0] = {0x1000, 4096, 5};
  r.sge[1] = {0x9000, 100, 6};
  WqeCheck check = check_recv_wqe(r);
  CHECK(check.error == WqeError::None);
  CHECK(check.length == 4196);
  const rocev2::RecvWr wr = to_recv_wr(r);
  CHECK(wr.wr_id == 7);
  REQUIRE(wr.sg_list.size() == 2);
  CHECK(wr.sg_list[1].addr == 0x9000);
  CHECK(wr.sg_list[1].length == 100);
  CHECK(wr.sg_list[1].lkey == rocev2::Lkey(6));

  r.num_sge = 0xFFFF'FFFF;
  CHECK(check_recv_wqe(r).error == WqeError::TooManySges);
  r.num_sge = 2;
  r.reserved = 1;
  CHECK(check_recv_wqe(r).error == WqeError::ReservedNotZero);
}

TEST_CASE("abi: a checked send WQE becomes the engine's work request") {
  SendWqe w = send_wqe(WrOpcode::AtomicCmpSwp, rocev2::send_flags::kSignaled | rocev2::send_flags::kFence);
  w.remote_addr = 0xABCD'0000'0000'0008;
  w.rkey = 0x77;
  w.compare_add = 5;
  w.swap = 6;
  w.remote_qpn = 0x0100'0011;  // only 24 bits are a QPN
  w.remote_qkey = 0x1111'1111;
  REQUIRE(check_send_wqe(w, QpType::Rc).error == WqeError::None);
  const rocev2::SendWr wr = to_send_wr(w);
  CHECK(wr.wr_id == w.wr_id);
  CHECK(wr.opcode == WrOpcode::AtomicCmpSwp);
  CHECK(wr.flags == (rocev2::send_flags::kSignaled | rocev2::send_flags::kFence));
  REQUIRE(wr.sg_list.size() == 1);
  CHECK(wr.sg_list[0].addr == 0x7F00'0000'1000);
  CHECK(wr.sg_list[0].length == 8);
  CHECK(wr.sg_list[0].lkey == rocev2::Lkey(0x1234));
  CHECK(wr.remote_addr == 0xABCD'0000'0000'0008);
  CHECK(wr.rkey == rocev2::Rkey(0x77));
  CHECK(wr.compare_add == 5);
  CHECK(wr.swap == 6);
  CHECK(wr.ud_remote_qpn == rocev2::Qpn(0x11));
  CHECK(wr.ud_remote_qkey == rocev2::Qkey(0x1111'1111));
  CHECK(wr.inline_data.empty());

  SendWqe in = send_wqe(WrOpcode::SendWithImm, rocev2::send_flags::kInline);
  in.imm_data = htobe32(0x01020304);  // as ibv_send_wr holds it (a __be32)
  in.inline_length = 3;
  in.inline_data[0] = 'a';
  in.inline_data[1] = 'b';
  in.inline_data[2] = 'c';
  const rocev2::SendWr iwr = to_send_wr(in);
  CHECK(iwr.inline_data == std::vector<std::uint8_t>{'a', 'b', 'c'});
  CHECK(iwr.sg_list.empty());
  CHECK(iwr.imm_data == 0x01020304);  // the number the engine puts big-endian on the wire
}

TEST_CASE("abi: random garbage WQEs through a ring are refused or consistent, never overread") {
  const RingGeometry g{16, sizeof(SendWqe)};
  const std::size_t size = g.region_size();
  auto* data = static_cast<std::uint8_t*>(::operator new(size, std::align_val_t{kCacheLine}));
  REQUIRE(format_ring({data, size}, g) == RingError::None);
  RingProducer producer({data, size}, g);
  RingConsumer consumer({data, size}, g);

  std::mt19937_64 random(20261122);
  std::vector<std::uint8_t> garbage(sizeof(SendWqe));
  int accepted = 0;
  int refused = 0;
  for (int i = 0; i < 20000; ++i) {
    for (auto& byte : garbage) byte = static_cast<std::uint8_t>(random());
    // Bias a few fields toward plausible values so that the accept paths run too.
    garbage[12] = static_cast<std::uint8_t>(random() % 12);  // opcode
    garbage[13] = static_cast<std::uint8_t>(random() % 20);  // num_sge
    for (int k = 8; k < 12; ++k) garbage[k] = k == 8 ? static_cast<std::uint8_t>(random() % 16) : 0;
    REQUIRE(producer.try_push(garbage) == PushResult::Pushed);
    producer.publish();
    SendWqe wqe{};
    REQUIRE(consumer.try_pop_value(wqe) == PopResult::Popped);
    REQUIRE(std::memcmp(&wqe, garbage.data(), sizeof(SendWqe)) == 0);
    const auto qp_type = static_cast<QpType>(2 + random() % 3);
    const WqeCheck check = check_send_wqe(wqe, qp_type);
    if (check.error != WqeError::None) {
      ++refused;
      continue;
    }
    ++accepted;
    const rocev2::SendWr wr = to_send_wr(wqe);
    std::uint64_t total = wr.inline_data.size();
    for (const auto& sge : wr.sg_list) total += sge.length;
    CHECK(total == check.length);
    CHECK(total <= kMaxMessageSize);
    CHECK(wr.sg_list.size() <= kMaxSge);
  }
  CHECK(accepted > 100);
  CHECK(refused > 100);
  ::operator delete(data, std::align_val_t{kCacheLine});
}

// The work-request table's rows, read the other way round: from what each operation must
// put on the wire (the IBA OpCode table) to the row. The table is built from the BTH opcode
// table; this says what the result has to be.
TEST_CASE("verbs codes: the work-request table gives each implemented opcode its wire opcodes, completion and transports") {
  using rocev2::Opcode;
  using rocev2::QpType;
  struct Expected {
    WrOpcode op;
    rocev2::WcOpcode completion;
    Opcode rc_only;
    Opcode rc_last;  // of a message of several packets
    bool uc, ud;
  };
  const Expected rows[] = {
      {WrOpcode::RdmaWrite, rocev2::WcOpcode::RdmaWrite, Opcode::RcWriteOnly, Opcode::RcWriteLast, true, false},
      {WrOpcode::RdmaWriteWithImm, rocev2::WcOpcode::RdmaWrite, Opcode::RcWriteOnlyImm, Opcode::RcWriteLastImm, true, false},
      {WrOpcode::Send, rocev2::WcOpcode::Send, Opcode::RcSendOnly, Opcode::RcSendLast, true, true},
      {WrOpcode::SendWithImm, rocev2::WcOpcode::Send, Opcode::RcSendOnlyImm, Opcode::RcSendLastImm, true, true},
      {WrOpcode::SendWithInv, rocev2::WcOpcode::Send, Opcode::RcSendOnlyInv, Opcode::RcSendLastInv, false, false},
      {WrOpcode::RdmaRead, rocev2::WcOpcode::RdmaRead, Opcode::RcReadRequest, Opcode::RcReadRequest, false, false},
      {WrOpcode::AtomicCmpSwp, rocev2::WcOpcode::CompSwap, Opcode::RcCompareSwap, Opcode::RcCompareSwap, false, false},
      {WrOpcode::AtomicFetchAdd, rocev2::WcOpcode::FetchAdd, Opcode::RcFetchAdd, Opcode::RcFetchAdd, false, false},
      // IBA 1.5 Annex A19: RC only, one packet each.
      {WrOpcode::Flush, rocev2::WcOpcode::Flush, Opcode::RcFlush, Opcode::RcFlush, false, false},
      {WrOpcode::AtomicWrite, rocev2::WcOpcode::AtomicWrite, Opcode::RcAtomicWrite, Opcode::RcAtomicWrite, false, false},
  };
  for (const Expected& e : rows) {
    const rocev2::WrOpcodeInfo& info = rocev2::wr_opcode_info(e.op);
    INFO(std::string(info.name));
    CHECK(info.implemented);
    CHECK(info.completion == e.completion);
    CHECK(info.request_opcode(QpType::Rc, true, true) == e.rc_only);
    CHECK(info.request_opcode(QpType::Rc, false, true) == e.rc_last);
    CHECK(info.allowed_on(QpType::Rc));
    CHECK(info.allowed_on(QpType::Uc) == e.uc);
    CHECK(info.allowed_on(QpType::Ud) == e.ud);
    if (e.uc) {
      CHECK(static_cast<unsigned>(info.request_opcode(QpType::Uc, true, true)) == (static_cast<unsigned>(e.rc_only) | 0x20u));
    }
  }
  CHECK(rocev2::wr_opcode_info(WrOpcode::Send).request_opcode(QpType::Ud, true, true) == Opcode::UdSendOnly);
  // The local operations are implemented on RC and UC, with no wire opcode (abi.h maps their
  // fields); a local operation with inline data is malformed.
  for (const WrOpcode op : {WrOpcode::LocalInv, WrOpcode::BindMw}) {
    CHECK(rocev2::wr_opcode_info(op).implemented);
    CHECK(rocev2::wr_opcode_info(op).local);
    CHECK(rocev2::wr_opcode_info(op).allowed_on(QpType::Uc));
    CHECK_FALSE(rocev2::wr_opcode_info(op).allowed_on(QpType::Ud));
    SendWqe w = send_wqe(op);
    CHECK(check_send_wqe(w, QpType::Rc).error == WqeError::None);
    CHECK(check_send_wqe(w, QpType::Ud).error == WqeError::OpcodeNotForQpType);
    w.send_flags |= rocev2::send_flags::kInline;
    CHECK(check_send_wqe(w, QpType::Rc).error == WqeError::InlineNotAllowed);
  }
  CHECK(rocev2::wr_opcode_info(WrOpcode::BindMw).completion == rocev2::WcOpcode::BindMw);
  CHECK(rocev2::wr_opcode_info(WrOpcode::LocalInv).completion == rocev2::WcOpcode::LocalInv);
  for (const WrOpcode op : {WrOpcode::Tso, WrOpcode::Driver1, static_cast<WrOpcode>(12), static_cast<WrOpcode>(255)}) {
    CHECK_FALSE(rocev2::wr_opcode_info(op).implemented);
    CHECK_FALSE(rocev2::wr_opcode_info(op).allowed_on(QpType::Ud));
  }
  CHECK(rocev2::name(WrOpcode::AtomicFetchAdd) == "ATOMIC_FETCH_AND_ADD");
  CHECK(rocev2::name(static_cast<WrOpcode>(255)) == "unknown");
}
