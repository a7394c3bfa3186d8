#include "stack/ethernet.h"

#include <cassert>

namespace rrdma::stack {

std::optional<EthernetView> EthernetView::check(ByteSpan frame) {
  if (frame.size() < header_length) return std::nullopt;
  return EthernetView(frame);
}

MacAddress EthernetView::destination() const { return load_mac(bytes_, destination_at); }
MacAddress EthernetView::source() const { return load_mac(bytes_, source_at); }

EthernetHeader EthernetHeader::parse(const EthernetView& view) {
  return {view.destination(), view.source(), view.ethertype()};
}

void EthernetHeader::emit(MutableByteSpan out) const {
  assert(out.size() >= length());
  store_mac(out, EthernetView::destination_at, destination);
  store_mac(out, EthernetView::source_at, source);
  store_be16(out, EthernetView::ethertype_at, static_cast<std::uint16_t>(ethertype));
}

}  // namespace rrdma::stack
