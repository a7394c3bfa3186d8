#include "rocev2/wire.h"

#include <algorithm>
#include <cassert>

#include "rocev2/text.h"

namespace rrdma::rocev2 {

namespace {

constexpr std::uint8_t bit(bool b, unsigned shift) { return static_cast<std::uint8_t>(b ? 1u << shift : 0u); }

}  // namespace

Bth parse(const BthView& v) {
  return Bth{.opcode = v.opcode(),
             .solicited = v.solicited(),
             .mig_req = v.mig_req(),
             .pad_count = v.pad_count(),
             .transport_version = v.transport_version(),
             .pkey = v.pkey(),
             .fecn = v.fecn(),
             .becn = v.becn(),
             .dest_qp = v.dest_qp(),
             .ack_req = v.ack_req(),
             .psn = v.psn()};
}
Reth parse(const RethView& v) { return {v.virtual_address(), v.rkey(), v.dma_length()}; }
Aeth parse(const AethView& v) { return {v.syndrome(), v.msn()}; }
AtomicEth parse(const AtomicEthView& v) { return {v.virtual_address(), v.rkey(), v.swap_add(), v.compare()}; }
AtomicAckEth parse(const AtomicAckEthView& v) { return {v.original_data()}; }
Deth parse(const DethView& v) { return {v.qkey(), v.src_qp()}; }
ImmDt parse(const ImmDtView& v) { return {v.value()}; }
Ieth parse(const IethView& v) { return {v.rkey()}; }
Feth parse(const FethView& v) { return {v.bits()}; }

void emit(const Bth& h, MutableByteSpan out) {
  out[BthView::kOpcodeAt] = static_cast<std::uint8_t>(h.opcode);
  out[BthView::kFlagsAt] = static_cast<std::uint8_t>(bit(h.solicited, 7) | bit(h.mig_req, 6) |
                                                     ((h.pad_count & 0x3) << 4) | (h.transport_version & 0x0F));
  store_be16(out, BthView::kPkeyAt, h.pkey.value());
  out[BthView::kEcnAt] = static_cast<std::uint8_t>(bit(h.fecn, 7) | bit(h.becn, 6));
  store_be24(out, BthView::kDestQpAt, h.dest_qp.value());
  out[BthView::kAckReqAt] = bit(h.ack_req, 7);
  store_be24(out, BthView::kPsnAt, h.psn.value());
}
void emit(const Reth& h, MutableByteSpan out) {
  store_be64(out, RethView::kVirtualAddressAt, h.virtual_address);
  store_be32(out, RethView::kRkeyAt, h.rkey.value());
  store_be32(out, RethView::kDmaLengthAt, h.dma_length);
}
void emit(const Aeth& h, MutableByteSpan out) {
  out[AethView::kSyndromeAt] = h.syndrome;
  store_be24(out, AethView::kMsnAt, h.msn.value());
}
void emit(const AtomicEth& h, MutableByteSpan out) {
  store_be64(out, AtomicEthView::kVirtualAddressAt, h.virtual_address);
  store_be32(out, AtomicEthView::kRkeyAt, h.rkey.value());
  store_be64(out, AtomicEthView::kSwapAddAt, h.swap_add);
  store_be64(out, AtomicEthView::kCompareAt, h.compare);
}
void emit(const AtomicAckEth& h, MutableByteSpan out) { store_be64(out, AtomicAckEthView::kOriginalDataAt, h.original_data); }
void emit(const Deth& h, MutableByteSpan out) {
  store_be32(out, DethView::kQkeyAt, h.qkey.value());
  out[DethView::kReservedAt] = 0;
  store_be24(out, DethView::kSrcQpAt, h.src_qp.value());
}
void emit(const ImmDt& h, MutableByteSpan out) { store_be32(out, 0, h.value); }
void emit(const Ieth& h, MutableByteSpan out) { store_be32(out, 0, h.rkey.value()); }
void emit(const Feth& h, MutableByteSpan out) { store_be32(out, 0, h.bits); }

std::string_view to_string(TransportError e) {
  switch (e) {
    case TransportError::none: return "none";
    case TransportError::truncated: return "truncated";
    case TransportError::unknown_opcode: return "unknown opcode";
    case TransportError::bad_transport_version: return "bad transport version";
    case TransportError::misaligned: return "misaligned";
    case TransportError::bad_pad_count: return "bad pad count";
    case TransportError::unexpected_payload: return "unexpected payload";
  }
  return "?";
}

std::string_view to_string(EmitError e) {
  switch (e) {
    case EmitError::none: return "none";
    case EmitError::unknown_opcode: return "unknown opcode";
    case EmitError::missing_header: return "missing header";
    case EmitError::unexpected_header: return "unexpected header";
    case EmitError::unexpected_payload: return "unexpected payload";
    case EmitError::bad_pad_count: return "bad pad count";
    case EmitError::buffer_too_small: return "buffer too small";
    case EmitError::too_long: return "too long";
  }
  return "?";
}

namespace {

// Reads the extension headers the opcode announces, in the order IBA ch. 9 puts them
// (DETH, FETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH; the same order
// opcode.h sums their lengths in). The caller has checked that they all fit.
class HeaderReader {
 public:
  HeaderReader(ByteSpan headers, OpcodeFlags flags) : rest_(headers), flags_(flags) {}

  template <typename View, typename Value>
  void take(OpcodeFlags::Bit present, std::optional<Value>& slot) {
    if (!flags_.has(present)) return;
    slot = parse(*View::check(rest_));
    rest_ = rest_.subspan(View::kLength);
  }

 private:
  ByteSpan rest_;
  OpcodeFlags flags_;
};

void read_extension_headers(ByteSpan headers, OpcodeFlags flags, TransportPacket& p) {
  using F = OpcodeFlags;
  HeaderReader r(headers, flags);
  r.take<DethView>(F::kDeth, p.deth);
  r.take<FethView>(F::kFeth, p.feth);
  r.take<RethView>(F::kReth, p.reth);
  r.take<AtomicEthView>(F::kAtomicEth, p.atomic_eth);
  r.take<AethView>(F::kAeth, p.aeth);
  r.take<AtomicAckEthView>(F::kAtomicAckEth, p.atomic_ack_eth);
  r.take<ImmDtView>(F::kImm, p.imm);
  r.take<IethView>(F::kIeth, p.ieth);
}

}  // namespace

TransportError parse_transport(ByteSpan udp_payload, TransportPacket& out) {
  const auto bth_view = BthView::check(udp_payload);
  if (!bth_view || udp_payload.size() < kBthLength + kIcrcLength) return TransportError::truncated;
  const OpcodeInfo info = opcode_info(bth_view->opcode());
  if (!info.flags.has(OpcodeFlags::kValid)) return TransportError::unknown_opcode;
  if (udp_payload.size() < info.header_length + kIcrcLength) return TransportError::truncated;
  if (bth_view->transport_version() != 0) return TransportError::bad_transport_version;
  if (udp_payload.size() % 4 != 0) return TransportError::misaligned;

  const std::size_t padded = udp_payload.size() - kIcrcLength - info.header_length;
  const std::uint8_t pad = bth_view->pad_count();
  if (pad > padded) return TransportError::bad_pad_count;
  if (padded != 0 && !info.flags.has(OpcodeFlags::kPayload)) return TransportError::unexpected_payload;

  out = TransportPacket{};
  out.bth = parse(*bth_view);
  read_extension_headers(udp_payload.subspan(kBthLength, info.header_length - kBthLength), info.flags, out);
  out.payload = udp_payload.subspan(info.header_length, padded - pad);
  return TransportError::none;
}

std::optional<TransportPacket> parse_transport(ByteSpan udp_payload) {
  TransportPacket p;
  if (parse_transport(udp_payload, p) != TransportError::none) return std::nullopt;
  return p;
}

std::size_t header_length(const TransportPacket& p) {
  const OpcodeInfo info = opcode_info(p.bth.opcode);
  return info.flags.has(OpcodeFlags::kValid) ? info.header_length : 0;
}

std::size_t transport_length(const TransportPacket& p) {
  return header_length(p) + p.payload.size() + pad_count_for(p.payload.size()) + kIcrcLength;
}

namespace {

// Calls `f(present, slot, length)` for each extension header slot of `p`, in the order IBA
// ch. 9 puts them after the BTH (the order read_extension_headers reads them in).
template <typename F>
void for_each_extension(const TransportPacket& p, F&& f) {
  using Fl = OpcodeFlags;
  f(Fl::kDeth, p.deth, kDethLength);
  f(Fl::kFeth, p.feth, kFethLength);
  f(Fl::kReth, p.reth, kRethLength);
  f(Fl::kAtomicEth, p.atomic_eth, kAtomicEthLength);
  f(Fl::kAeth, p.aeth, kAethLength);
  f(Fl::kAtomicAckEth, p.atomic_ack_eth, kAtomicAckEthLength);
  f(Fl::kImm, p.imm, kImmLength);
  f(Fl::kIeth, p.ieth, kIethLength);
}

// The BTH and the extension headers present, at the start of `out` (checked packet, room
// for header_length(p) bytes).
MutableByteSpan write_headers(const TransportPacket& p, MutableByteSpan out) {
  emit(p.bth, out);
  MutableByteSpan rest = out.subspan(kBthLength);
  for_each_extension(p, [&rest](OpcodeFlags::Bit, const auto& slot, std::size_t length) {
    if (!slot) return;
    emit(*slot, rest);
    rest = rest.subspan(length);
  });
  return rest;
}

}  // namespace

EmitError check_transport(const TransportPacket& p) {
  using F = OpcodeFlags;
  const OpcodeInfo info = opcode_info(p.bth.opcode);
  if (!info.flags.has(F::kValid)) return EmitError::unknown_opcode;
  if (!p.payload.empty() && !info.flags.has(F::kPayload)) return EmitError::unexpected_payload;
  EmitError error = EmitError::none;
  for_each_extension(p, [&](OpcodeFlags::Bit present, const auto& slot, std::size_t) {
    if (error == EmitError::none && info.flags.has(present) != slot.has_value())
      error = slot ? EmitError::unexpected_header : EmitError::missing_header;
  });
  if (error != EmitError::none) return error;
  if (p.bth.pad_count != pad_count_for(p.payload.size())) return EmitError::bad_pad_count;
  return EmitError::none;
}

void write_transport(const TransportPacket& p, MutableByteSpan out) {
  assert(check_transport(p) == EmitError::none && out.size() >= transport_length(p) - kIcrcLength);
  const MutableByteSpan body = write_headers(p, out);
  const auto pad = std::copy(p.payload.begin(), p.payload.end(), body.begin());
  std::fill_n(pad, p.bth.pad_count, std::uint8_t{0});
}

EmitError emit_transport_headers(const TransportPacket& p, MutableByteSpan out) {
  const EmitError e = check_transport(p);
  if (e != EmitError::none) return e;
  if (out.size() < header_length(p)) return EmitError::buffer_too_small;
  write_headers(p, out);
  return EmitError::none;
}

EmitError emit_transport(const TransportPacket& p, MutableByteSpan out) {
  const EmitError e = check_transport(p);
  if (e != EmitError::none) return e;
  if (out.size() < transport_length(p) - kIcrcLength) return EmitError::buffer_too_small;
  write_transport(p, out);
  return EmitError::none;
}

namespace {

void describe_bth(std::string& out, const Bth& b) {
  out.append(opcode_info(b.opcode).name);
  if (!is_valid(b.opcode)) append(out, "(0x%02x)", static_cast<unsigned>(b.opcode));
  append(out, " qp 0x%06x psn %u", b.dest_qp.value(), b.psn.value());
  if (b.ack_req) out.append(" A");
  if (b.solicited) out.append(" SE");
  if (b.mig_req) out.append(" M");
  if (b.fecn) out.append(" FECN");
  if (b.becn) out.append(" BECN");
  if (b.pad_count != 0) append(out, " pad %u", unsigned{b.pad_count});
  if (b.pkey != kDefaultPkey) append(out, " pkey 0x%04x", unsigned{b.pkey.value()});
}

}  // namespace

std::string describe(const TransportPacket& p) {
  std::string out;
  describe_bth(out, p.bth);
  if (p.deth) append(out, " deth{qkey 0x%x src_qp 0x%06x}", p.deth->qkey.value(), p.deth->src_qp.value());
  if (p.feth) append(out, " feth{0x%08x}", p.feth->bits);
  if (p.reth)
    append(out, " reth{va 0x%llx rkey 0x%x len %u}", static_cast<unsigned long long>(p.reth->virtual_address),
           p.reth->rkey.value(), p.reth->dma_length);
  if (p.atomic_eth)
    append(out, " atomic{va 0x%llx rkey 0x%x swap_add %llu compare %llu}",
           static_cast<unsigned long long>(p.atomic_eth->virtual_address), p.atomic_eth->rkey.value(),
           static_cast<unsigned long long>(p.atomic_eth->swap_add),
           static_cast<unsigned long long>(p.atomic_eth->compare));
  if (p.aeth) append(out, " aeth{syndrome 0x%02x msn %u}", unsigned{p.aeth->syndrome}, p.aeth->msn.value());
  if (p.atomic_ack_eth)
    append(out, " atomic_ack{orig %llu}", static_cast<unsigned long long>(p.atomic_ack_eth->original_data));
  if (p.imm) append(out, " imm 0x%08x", p.imm->value);
  if (p.ieth) append(out, " ieth{rkey 0x%x}", p.ieth->rkey.value());
  if (!p.payload.empty()) append(out, " payload %zu", p.payload.size());
  return out;
}

}  // namespace rrdma::rocev2
