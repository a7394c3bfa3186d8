// The IB transport headers carried by RoCE v2, on the wire (IBA ch. 9; layout in
// PROTOCOL.md and docs/WIRE.md). For each header: a checked view over received bytes
// (after check() succeeds no accessor can read outside the header), and parse/emit between
// the view and the value struct of headers.h. parse_transport() takes a whole UDP payload
// (BTH .. ICRC) apart, driven by the opcode table; write_transport() is its inverse, the
// one serializer every RoCE frame we build goes through (encap.h says how it is placed in a
// frame). The ICRC itself is computed, written and checked in icrc.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "rocev2/headers.h"
#include "rocev2/opcode.h"
#include "rocev2/packet.h"
#include "stack/bytes.h"

namespace rrdma::rocev2 {

// What every header view shares: check() is the only way to make one, and the view then
// covers exactly Length bytes, so no accessor of `View` can read outside its header.
template <typename View, std::size_t Length>
class FixedLengthView {
 public:
  static constexpr std::size_t kLength = Length;
  // nullopt if `bytes` is too short.
  static std::optional<View> check(ByteSpan bytes) {
    if (bytes.size() < kLength) return std::nullopt;
    return View(bytes.first(kLength));
  }
  ByteSpan bytes() const { return b_; }

 protected:
  explicit FixedLengthView(ByteSpan b) : b_(b) {}
  ByteSpan b_;
};

// Base Transport Header (IBA ch. 9), 12 bytes.
class BthView : public FixedLengthView<BthView, kBthLength> {
 public:
  // Field offsets (IBA ch. 9, BTH).
  static constexpr std::size_t kOpcodeAt = 0;
  static constexpr std::size_t kFlagsAt = 1;  // SE, M, PadCnt, TVer
  static constexpr std::size_t kPkeyAt = 2;
  // FECN, BECN and 6 reserved bits: the ICRC masks this byte (IBA 7.8.1 via Annex A17.3.3).
  static constexpr std::size_t kEcnAt = 4;
  static constexpr std::size_t kDestQpAt = 5;
  static constexpr std::size_t kAckReqAt = 8;  // A, then 7 reserved bits
  static constexpr std::size_t kPsnAt = 9;

  Opcode opcode() const { return Opcode{b_[kOpcodeAt]}; }
  bool solicited() const { return (b_[kFlagsAt] & 0x80) != 0; }
  bool mig_req() const { return (b_[kFlagsAt] & 0x40) != 0; }
  std::uint8_t pad_count() const { return (b_[kFlagsAt] >> 4) & 0x3; }
  std::uint8_t transport_version() const { return b_[kFlagsAt] & 0x0F; }
  Pkey pkey() const { return Pkey{load_be16(b_, kPkeyAt)}; }
  bool fecn() const { return (b_[kEcnAt] & 0x80) != 0; }
  bool becn() const { return (b_[kEcnAt] & 0x40) != 0; }
  Qpn dest_qp() const { return Qpn{load_be24(b_, kDestQpAt)}; }
  bool ack_req() const { return (b_[kAckReqAt] & 0x80) != 0; }
  Psn psn() const { return Psn{load_be24(b_, kPsnAt)}; }

 private:
  friend FixedLengthView;
  explicit BthView(ByteSpan b) : FixedLengthView(b) {}
};

// RDMA Extended Transport Header (IBA ch. 9), 16 bytes.
class RethView : public FixedLengthView<RethView, kRethLength> {
 public:
  // Field offsets (IBA ch. 9).
  static constexpr std::size_t kVirtualAddressAt = 0;
  static constexpr std::size_t kRkeyAt = 8;
  static constexpr std::size_t kDmaLengthAt = 12;
  std::uint64_t virtual_address() const { return load_be64(b_, kVirtualAddressAt); }
  Rkey rkey() const { return Rkey{load_be32(b_, kRkeyAt)}; }
  std::uint32_t dma_length() const { return load_be32(b_, kDmaLengthAt); }

 private:
  friend FixedLengthView;
  explicit RethView(ByteSpan b) : FixedLengthView(b) {}
};

// ACK Extended Transport Header (IBA ch. 9), 4 bytes.
class AethView : public FixedLengthView<AethView, kAethLength> {
 public:
  // Field offsets (IBA ch. 9).
  static constexpr std::size_t kSyndromeAt = 0;
  static constexpr std::size_t kMsnAt = 1;
  std::uint8_t syndrome() const { return b_[kSyndromeAt]; }
  Msn msn() const { return Msn{load_be24(b_, kMsnAt)}; }

 private:
  friend FixedLengthView;
  explicit AethView(ByteSpan b) : FixedLengthView(b) {}
};

// Atomic Extended Transport Header (IBA ch. 9), 28 bytes.
class AtomicEthView : public FixedLengthView<AtomicEthView, kAtomicEthLength> {
 public:
  // Field offsets (IBA ch. 9).
  static constexpr std::size_t kVirtualAddressAt = 0;
  static constexpr std::size_t kRkeyAt = 8;
  static constexpr std::size_t kSwapAddAt = 12;
  static constexpr std::size_t kCompareAt = 20;
  std::uint64_t virtual_address() const { return load_be64(b_, kVirtualAddressAt); }
  Rkey rkey() const { return Rkey{load_be32(b_, kRkeyAt)}; }
  std::uint64_t swap_add() const { return load_be64(b_, kSwapAddAt); }
  std::uint64_t compare() const { return load_be64(b_, kCompareAt); }

 private:
  friend FixedLengthView;
  explicit AtomicEthView(ByteSpan b) : FixedLengthView(b) {}
};

// Atomic ACK Extended Transport Header (IBA ch. 9), 8 bytes.
class AtomicAckEthView : public FixedLengthView<AtomicAckEthView, kAtomicAckEthLength> {
 public:
  // Field offsets (IBA ch. 9).
  static constexpr std::size_t kOriginalDataAt = 0;
  std::uint64_t original_data() const { return load_be64(b_, kOriginalDataAt); }

 private:
  friend FixedLengthView;
  explicit AtomicAckEthView(ByteSpan b) : FixedLengthView(b) {}
};

// Datagram Extended Transport Header (IBA ch. 9), 8 bytes: Q_Key, 1 reserved byte, source QP.
class DethView : public FixedLengthView<DethView, kDethLength> {
 public:
  // Field offsets (IBA ch. 9).
  static constexpr std::size_t kQkeyAt = 0;
  static constexpr std::size_t kReservedAt = 4;
  static constexpr std::size_t kSrcQpAt = 5;
  Qkey qkey() const { return Qkey{load_be32(b_, kQkeyAt)}; }
  Qpn src_qp() const { return Qpn{load_be24(b_, kSrcQpAt)}; }

 private:
  friend FixedLengthView;
  explicit DethView(ByteSpan b) : FixedLengthView(b) {}
};

// Immediate data (IBA ch. 9, ImmDt), 4 bytes. The value is the big-endian reading of the four
// bytes, as Wireshark shows it; ibv_wc.imm_data (a __be32) is its htobe32().
class ImmDtView : public FixedLengthView<ImmDtView, kImmLength> {
 public:
  std::uint32_t value() const { return load_be32(b_, 0); }

 private:
  friend FixedLengthView;
  explicit ImmDtView(ByteSpan b) : FixedLengthView(b) {}
};

// Invalidate Extended Transport Header (IBA ch. 9, IETH), 4 bytes: the R_Key to invalidate.
class IethView : public FixedLengthView<IethView, kIethLength> {
 public:
  Rkey rkey() const { return Rkey{load_be32(b_, 0)}; }

 private:
  friend FixedLengthView;
  explicit IethView(ByteSpan b) : FixedLengthView(b) {}
};

// FLUSH Extended Transport Header (IBA release 1.5, Annex A19), 4 bytes, kept whole.
class FethView : public FixedLengthView<FethView, kFethLength> {
 public:
  std::uint32_t bits() const { return load_be32(b_, 0); }

 private:
  friend FixedLengthView;
  explicit FethView(ByteSpan b) : FixedLengthView(b) {}
};

// View -> value. Reserved bits are ignored on receive and written as zero on emit.
Bth parse(const BthView& v);
Reth parse(const RethView& v);
Aeth parse(const AethView& v);
AtomicEth parse(const AtomicEthView& v);
AtomicAckEth parse(const AtomicAckEthView& v);
Deth parse(const DethView& v);
ImmDt parse(const ImmDtView& v);
Ieth parse(const IethView& v);
Feth parse(const FethView& v);

// Value -> bytes, at the start of `out`, which must hold the header (k*Length in opcode.h).
void emit(const Bth& h, MutableByteSpan out);
void emit(const Reth& h, MutableByteSpan out);
void emit(const Aeth& h, MutableByteSpan out);
void emit(const AtomicEth& h, MutableByteSpan out);
void emit(const AtomicAckEth& h, MutableByteSpan out);
void emit(const Deth& h, MutableByteSpan out);
void emit(const ImmDt& h, MutableByteSpan out);
void emit(const Ieth& h, MutableByteSpan out);
void emit(const Feth& h, MutableByteSpan out);

// Why a UDP payload is not a well-formed IB transport packet, in the order checked.
enum class TransportError : std::uint8_t {
  none,
  truncated,              // shorter than the BTH, its extension headers, pad and ICRC
  unknown_opcode,         // not in the opcode table (reserved, RD, or vendor-specific)
  bad_transport_version,  // TVer != 0 (IBA 9.6 header checks drop other versions)
  misaligned,             // transport packet not a multiple of 4 bytes (the BTH PadCnt aligns it)
  bad_pad_count,          // more pad bytes than payload bytes
  unexpected_payload,     // payload on an opcode that carries none (ACK, READ request, atomic)
};
std::string_view to_string(TransportError e);

// Takes apart one UDP payload: BTH, the extension headers its opcode carries, the payload
// (pad excluded) and the 4-byte ICRC at the end, which is NOT verified here (it needs the
// IP header: see icrc.h / encap.h). On success `out` is filled; its payload borrows from
// `udp_payload`. On failure `out` is left in an unspecified state.
TransportError parse_transport(ByteSpan udp_payload, TransportPacket& out);
std::optional<TransportPacket> parse_transport(ByteSpan udp_payload);

// The number of pad bytes that bring a payload to a 4-byte boundary (the BTH PadCnt).
constexpr std::uint8_t pad_count_for(std::size_t payload_length) {
  return static_cast<std::uint8_t>((4 - payload_length % 4) % 4);
}

// BTH and extension headers of the packet's opcode, in bytes (0 for an unknown opcode).
std::size_t header_length(const TransportPacket& p);
// Headers + payload + pad + ICRC: the UDP payload length of the packet.
std::size_t transport_length(const TransportPacket& p);

enum class EmitError : std::uint8_t {
  none,
  unknown_opcode,
  missing_header,     // the opcode carries a header the packet does not have
  unexpected_header,  // the packet has a header its opcode does not carry
  unexpected_payload, // payload on an opcode that carries none
  bad_pad_count,      // bth.pad_count != pad_count_for(payload.size())
  buffer_too_small,
  too_long,           // the frame would exceed the IPv4 total length of 65535
};
std::string_view to_string(EmitError e);

// Whether `p` can go on the wire as it is, without writing a byte: its opcode is in the
// table, it carries exactly the extension headers the opcode does (checked in IBA order, the
// first difference named), payload only if the opcode has one, and a BTH pad count equal to
// pad_count_for(payload). A sender asks this before the stack starts a frame, so that a
// refused packet (an engine bug) is never half sent.
EmitError check_transport(const TransportPacket& p);

// The one transport serializer: BTH, extension headers, payload and zero pad, each written
// once, into the first transport_length(p) - kIcrcLength bytes of `out` (the ICRC is
// written afterwards over the final IPv4 header: encap.h). For a packet check_transport
// accepted and a buffer that holds it; emit_transport below checks both first.
void write_transport(const TransportPacket& p, MutableByteSpan out);

// check_transport, then the BTH and the extension headers (header_length(p) bytes) at the
// start of `out`.
EmitError emit_transport_headers(const TransportPacket& p, MutableByteSpan out);
// check_transport and the size of `out`, then write_transport.
EmitError emit_transport(const TransportPacket& p, MutableByteSpan out);

// One line for a trace: the opcode's name, the BTH fields, each extension header present,
// the payload length. E.g. "RC RDMA_WRITE_FIRST qp 0x000011 psn 16161330
// reth{va 0x55fb890d8710 rkey 0x2ff len 10000} payload 1024".
std::string describe(const TransportPacket& p);

}  // namespace rrdma::rocev2
