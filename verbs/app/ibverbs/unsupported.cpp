// Exported verbs a vnic does not offer. Each fails the way its man page reports errors,
// with EOPNOTSUPP as the reason, so a program that probes for a feature learns it is absent
// and one that needs it stops with a clear message, never a crash (docs/IBVERBS.md lists them
// with why). Plus ibv_init_ah_from_wc / ibv_create_ah_from_wc, which need the GRH area of a
// UD receive.
#include <cstring>

#include "verbs/app/ibverbs/shim.h"

using namespace rrdma::ibverbs;

extern "C" {

// Multicast: the stack drops multicast frames (README, "What does not work yet").
RRDMA_EXPORT int ibv_attach_mcast(ibv_qp*, const ibv_gid*, std::uint16_t) { return fail_code(EOPNOTSUPP); }
RRDMA_EXPORT int ibv_detach_mcast(ibv_qp*, const ibv_gid*, std::uint16_t) { return fail_code(EOPNOTSUPP); }

// Sharing objects between processes through a uverbs command fd: our cmd_fd is a real
// descriptor (context.cpp) but no kernel object stands behind it, so nothing can be imported.
RRDMA_EXPORT ibv_context* ibv_import_device(int) { return fail_null<ibv_context>(EOPNOTSUPP); }
RRDMA_EXPORT ibv_pd* ibv_import_pd(ibv_context*, std::uint32_t) { return fail_null<ibv_pd>(EOPNOTSUPP); }
RRDMA_EXPORT ibv_mr* ibv_import_mr(ibv_pd*, std::uint32_t) { return fail_null<ibv_mr>(EOPNOTSUPP); }
RRDMA_EXPORT ibv_dm* ibv_import_dm(ibv_context*, std::uint32_t) { return fail_null<ibv_dm>(EOPNOTSUPP); }
// Nothing can have been imported, so there is nothing to release.
RRDMA_EXPORT void ibv_unimport_pd(ibv_pd*) {}
RRDMA_EXPORT void ibv_unimport_mr(ibv_mr*) {}
RRDMA_EXPORT void ibv_unimport_dm(ibv_dm*) {}

// Enhanced Connection Establishment is a vendor negotiation (ibv_set_ece(3)); we have no
// options to offer.
RRDMA_EXPORT int ibv_set_ece(ibv_qp*, ibv_ece*) { return fail_code(EOPNOTSUPP); }
RRDMA_EXPORT int ibv_query_ece(ibv_qp*, ibv_ece*) { return fail_code(EOPNOTSUPP); }

// dma-buf memory belongs to a device driver; process_vm_readv cannot reach it.
RRDMA_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, std::uint64_t, size_t, std::uint64_t, int, int) {
  return fail_null<ibv_mr>(EOPNOTSUPP);
}

// ibv_query_qp_data_in_order(3): 0 = no guarantee beyond what the completion says. The
// daemon writes a message's payload in PSN order, but we do not promise more than verbs.
RRDMA_EXPORT int ibv_query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, std::uint32_t) { return 0; }

// The destination MAC is the daemon's business (its ARP cache), not the application's.
RRDMA_EXPORT int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, std::uint8_t*, std::uint16_t*) {
  errno = EOPNOTSUPP;
  return -1;
}

// RoCE v2 over IPv4 (IBA Annex A17): the 40-byte GRH area of a UD receive holds the
// packet's IPv4 header in its last 20 bytes; the sender's GID is its source address,
// IPv4-mapped.
RRDMA_EXPORT int ibv_init_ah_from_wc(ibv_context* context, std::uint8_t port_num, ibv_wc* wc, ibv_grh* grh,
                                     ibv_ah_attr* ah_attr) {
  if (context == nullptr || wc == nullptr || grh == nullptr || ah_attr == nullptr) {
    errno = EINVAL;
    return -1;
  }
  if ((wc->wc_flags & IBV_WC_GRH) == 0) {
    errno = EOPNOTSUPP;  // no GRH: RoCE cannot address a reply without one
    return -1;
  }
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(grh);
  const std::uint8_t* ipv4 = bytes + 20;
  if ((ipv4[0] >> 4) != 4) {
    errno = EOPNOTSUPP;  // an IPv6 RoCE v2 header: we do not build IPv6
    return -1;
  }
  *ah_attr = ibv_ah_attr{};
  ah_attr->is_global = 1;
  ah_attr->port_num = port_num;
  ah_attr->grh.hop_limit = 64;
  ah_attr->grh.traffic_class = ipv4[1];
  ah_attr->grh.sgid_index = 0;
  ah_attr->grh.dgid.raw[10] = 0xff;
  ah_attr->grh.dgid.raw[11] = 0xff;
  std::memcpy(&ah_attr->grh.dgid.raw[12], ipv4 + 12, 4);  // the IPv4 source address
  ah_attr->sl = wc->sl;
  return 0;
}

RRDMA_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, std::uint8_t port_num) {
  if (pd == nullptr) return fail_null<ibv_ah>(EINVAL);
  ibv_ah_attr attr;
  if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr) != 0) return nullptr;
  return ibv_create_ah(pd, &attr);
}

}  // extern "C"
