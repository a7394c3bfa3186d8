// The parts of libibverbs that touch no device: the *_str helpers, rate conversions, the
// kernel-ABI struct copies librdmacm imports, sysfs helpers and the fork calls. Strings and
// numbers are the ones the man pages and verbs.h define, so programs print what they print
// over rdma-core.
#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "verbs/app/ibverbs/shim.h"

namespace {

template <std::size_t N>
const char* pick(const char* const (&names)[N], unsigned index, const char* fallback) {
  return index < N ? names[index] : fallback;
}

struct RateRow {
  ibv_rate rate;
  int mult;  // of 2.5 Gbit/s; 0 when the rate is not a multiple of it
  int mbps;
};
constexpr RateRow kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},     {IBV_RATE_5_GBPS, 2, 5000},
    {IBV_RATE_10_GBPS, 4, 10000},     {IBV_RATE_20_GBPS, 8, 20000},
    {IBV_RATE_30_GBPS, 12, 30000},    {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},    {IBV_RATE_80_GBPS, 32, 80000},
    {IBV_RATE_120_GBPS, 48, 120000},  {IBV_RATE_14_GBPS, 0, 14062},
    {IBV_RATE_56_GBPS, 0, 56250},     {IBV_RATE_112_GBPS, 0, 112500},
    {IBV_RATE_168_GBPS, 0, 168750},   {IBV_RATE_25_GBPS, 0, 25781},
    {IBV_RATE_100_GBPS, 0, 103125},   {IBV_RATE_200_GBPS, 0, 206250},
    {IBV_RATE_300_GBPS, 0, 309375},   {IBV_RATE_28_GBPS, 0, 28125},
    {IBV_RATE_50_GBPS, 0, 53125},     {IBV_RATE_400_GBPS, 0, 425000},
    {IBV_RATE_600_GBPS, 0, 637500},   {IBV_RATE_800_GBPS, 0, 850000},
    {IBV_RATE_1200_GBPS, 0, 1275000},
};

void copy_ah_attr(ibv_ah_attr& dst, const ib_uverbs_ah_attr& src) {
  std::memcpy(dst.grh.dgid.raw, src.grh.dgid, sizeof dst.grh.dgid.raw);
  dst.grh.flow_label = src.grh.flow_label;
  dst.grh.sgid_index = src.grh.sgid_index;
  dst.grh.hop_limit = src.grh.hop_limit;
  dst.grh.traffic_class = src.grh.traffic_class;
  dst.dlid = src.dlid;
  dst.sl = src.sl;
  dst.src_path_bits = src.src_path_bits;
  dst.static_rate = src.static_rate;
  dst.is_global = src.is_global;
  dst.port_num = src.port_num;
}

}  // namespace

// Declared by rdma-core's internal headers (driver.h, marshall.h), which Debian does not ship.
extern "C" {
RRDMA_EXPORT void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, ib_uverbs_ah_attr* src);
RRDMA_EXPORT void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, ib_uverbs_qp_attr* src);
RRDMA_EXPORT void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst, ib_user_path_rec* src);
RRDMA_EXPORT void ibv_copy_path_rec_to_kern(ib_user_path_rec* dst, ibv_sa_path_rec* src);
RRDMA_EXPORT int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size);
RRDMA_EXPORT const char* ibv_get_sysfs_path(void);
RRDMA_EXPORT int ibv_dontfork_range(void* base, size_t size);
RRDMA_EXPORT int ibv_dofork_range(void* base, size_t size);
}

extern "C" {

RRDMA_EXPORT const char* ibv_wc_status_str(enum ibv_wc_status status) {
  return rrdma::rocev2::name(static_cast<rrdma::rocev2::WcStatus>(status)).data();
}

RRDMA_EXPORT const char* ibv_node_type_str(enum ibv_node_type node_type) {
  static const char* const kNames[] = {"InfiniBand channel adapter", "InfiniBand switch",
                                       "InfiniBand router", "iWARP NIC", "usNIC", "usNIC UDP",
                                       "unspecified"};
  const int index = static_cast<int>(node_type) - IBV_NODE_CA;
  return index < 0 ? "unknown" : pick(kNames, static_cast<unsigned>(index), "unknown");
}

RRDMA_EXPORT const char* ibv_port_state_str(enum ibv_port_state port_state) {
  static const char* const kNames[] = {"PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED",
                                       "PORT_ACTIVE", "PORT_ACTIVE_DEFER"};
  return pick(kNames, static_cast<unsigned>(port_state), "invalid state");
}

RRDMA_EXPORT const char* ibv_event_type_str(enum ibv_event_type event) {
  return rrdma::rocev2::name(static_cast<rrdma::rocev2::EventType>(event)).data();
}

RRDMA_EXPORT int ibv_rate_to_mult(enum ibv_rate rate) {
  for (const auto& row : kRates)
    if (row.rate == rate && row.mult != 0) return row.mult;
  return -1;
}

RRDMA_EXPORT enum ibv_rate mult_to_ibv_rate(int mult) {
  for (const auto& row : kRates)
    if (row.mult == mult && mult != 0) return row.rate;
  return IBV_RATE_MAX;
}

RRDMA_EXPORT int ibv_rate_to_mbps(enum ibv_rate rate) {
  for (const auto& row : kRates)
    if (row.rate == rate) return row.mbps;
  return -1;
}

RRDMA_EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const auto& row : kRates)
    if (row.mbps == mbps) return row.rate;
  return IBV_RATE_MAX;
}

// We never pin application memory (the daemon reaches it with process_vm_readv/writev), so a
// fork needs no preparation: madvise(MADV_DONTFORK) is not used and fork is always safe.
RRDMA_EXPORT int ibv_fork_init(void) { return 0; }
RRDMA_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }
RRDMA_EXPORT int ibv_dontfork_range(void*, size_t) { return 0; }
RRDMA_EXPORT int ibv_dofork_range(void*, size_t) { return 0; }

// As rdma-core's (without $SYSFS_PATH): under `rrdma-vnic exec` the vnics are in its
// /sys/class (docs/IBVERBS.md "The sysfs view").
RRDMA_EXPORT const char* ibv_get_sysfs_path(void) { return "/sys"; }

RRDMA_EXPORT int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
  if (dir == nullptr || file == nullptr || buf == nullptr || size == 0) {
    errno = EINVAL;
    return -1;
  }
  const std::string path = std::string(dir) + "/" + file;
  std::FILE* stream = std::fopen(path.c_str(), "re");
  if (stream == nullptr) return -1;
  const std::size_t got = std::fread(buf, 1, size - 1, stream);
  std::fclose(stream);
  buf[got] = '\0';
  std::size_t length = got;
  if (length > 0 && buf[length - 1] == '\n') buf[--length] = '\0';
  return static_cast<int>(length);
}

RRDMA_EXPORT void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, ib_uverbs_ah_attr* src) {
  if (dst != nullptr && src != nullptr) copy_ah_attr(*dst, *src);
}

RRDMA_EXPORT void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, ib_uverbs_qp_attr* src) {
  if (dst == nullptr || src == nullptr) return;
  dst->qp_state = static_cast<ibv_qp_state>(src->qp_state);
  dst->cur_qp_state = static_cast<ibv_qp_state>(src->cur_qp_state);
  dst->path_mtu = static_cast<ibv_mtu>(src->path_mtu);
  dst->path_mig_state = static_cast<ibv_mig_state>(src->path_mig_state);
  dst->qkey = src->qkey;
  dst->rq_psn = src->rq_psn;
  dst->sq_psn = src->sq_psn;
  dst->dest_qp_num = src->dest_qp_num;
  dst->qp_access_flags = src->qp_access_flags;
  dst->cap.max_send_wr = src->max_send_wr;
  dst->cap.max_recv_wr = src->max_recv_wr;
  dst->cap.max_send_sge = src->max_send_sge;
  dst->cap.max_recv_sge = src->max_recv_sge;
  dst->cap.max_inline_data = src->max_inline_data;
  copy_ah_attr(dst->ah_attr, src->ah_attr);
  copy_ah_attr(dst->alt_ah_attr, src->alt_ah_attr);
  dst->pkey_index = src->pkey_index;
  dst->alt_pkey_index = src->alt_pkey_index;
  dst->en_sqd_async_notify = src->en_sqd_async_notify;
  dst->sq_draining = src->sq_draining;
  dst->max_rd_atomic = src->max_rd_atomic;
  dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
  dst->min_rnr_timer = src->min_rnr_timer;
  dst->port_num = src->port_num;
  dst->timeout = src->timeout;
  dst->retry_cnt = src->retry_cnt;
  dst->rnr_retry = src->rnr_retry;
  dst->alt_port_num = src->alt_port_num;
  dst->alt_timeout = src->alt_timeout;
}

RRDMA_EXPORT void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst, ib_user_path_rec* src) {
  if (dst == nullptr || src == nullptr) return;
  std::memcpy(dst->dgid.raw, src->dgid, sizeof dst->dgid.raw);
  std::memcpy(dst->sgid.raw, src->sgid, sizeof dst->sgid.raw);
  dst->dlid = src->dlid;
  dst->slid = src->slid;
  dst->raw_traffic = static_cast<int>(src->raw_traffic);
  dst->flow_label = src->flow_label;
  dst->reversible = static_cast<int>(src->reversible);
  dst->mtu = static_cast<std::uint8_t>(src->mtu);
  dst->pkey = src->pkey;
  dst->hop_limit = src->hop_limit;
  dst->traffic_class = src->traffic_class;
  dst->numb_path = src->numb_path;
  dst->sl = src->sl;
  dst->mtu_selector = src->mtu_selector;
  dst->rate_selector = src->rate_selector;
  dst->rate = src->rate;
  dst->packet_life_time_selector = src->packet_life_time_selector;
  dst->packet_life_time = src->packet_life_time;
  dst->preference = src->preference;
}

RRDMA_EXPORT void ibv_copy_path_rec_to_kern(ib_user_path_rec* dst, ibv_sa_path_rec* src) {
  if (dst == nullptr || src == nullptr) return;
  std::memcpy(dst->dgid, src->dgid.raw, sizeof dst->dgid);
  std::memcpy(dst->sgid, src->sgid.raw, sizeof dst->sgid);
  dst->dlid = src->dlid;
  dst->slid = src->slid;
  dst->raw_traffic = static_cast<std::uint32_t>(src->raw_traffic);
  dst->flow_label = src->flow_label;
  dst->reversible = static_cast<std::uint32_t>(src->reversible);
  dst->mtu = src->mtu;
  dst->pkey = src->pkey;
  dst->hop_limit = src->hop_limit;
  dst->traffic_class = src->traffic_class;
  dst->numb_path = src->numb_path;
  dst->sl = src->sl;
  dst->mtu_selector = src->mtu_selector;
  dst->rate_selector = src->rate_selector;
  dst->rate = src->rate;
  dst->packet_life_time_selector = src->packet_life_time_selector;
  dst->packet_life_time = src->packet_life_time;
  dst->preference = src->preference;
}

}  // extern "C"
