// Runs in the application process (the rdma_cm shim, librrdma_ucma.so).
//
// The ucma commands as the kernel's ucma_write (drivers/infiniband/core/ucma.c, Linux 6.1)
// takes them: for each RDMA_USER_CM_CMD_* the size of its structure after the 8-byte header,
// where its `response` user pointer sits (not always at 0: CREATE_ID has `uid` first), and the
// smallest `out` the kernel accepts before it answers ENOSPC. The shim asks this table instead
// of switching on command numbers; the layouts are <rdma/rdma_user_cm.h>'s own.
#pragma once

#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_cm.h>

#include <array>
#include <cstddef>
#include <cstdint>

namespace rrdma::ucma_shim {

inline constexpr std::int16_t kNoResponse = -1;

struct CommandInfo {
  std::uint32_t command = 0;
  const char* name = "";
  std::uint16_t body_size = 0;            // sizeof the uapi structure after the header
  std::int16_t response_at = kNoResponse;  // offset of `response` in that structure
  std::uint16_t min_out = 0;              // a smaller `out` is ENOSPC, as in the kernel
  bool served = true;                     // false: the kernel has no handler (ENOSYS)
};

namespace detail {

template <typename Body>
constexpr CommandInfo plain(std::uint32_t command, const char* name) {
  return {command, name, sizeof(Body), kNoResponse, 0, true};
}
template <typename Body>
constexpr CommandInfo answered(std::uint32_t command, const char* name, std::size_t min_out) {
  return {command, name, sizeof(Body), static_cast<std::int16_t>(offsetof(Body, response)),
          static_cast<std::uint16_t>(min_out), true};
}

// GET_EVENT accepts an `out` without the trailing reserved word and ECE (older librdmacm).
inline constexpr std::size_t kEventMinOut =
    sizeof(rdma_ucm_event_resp) - sizeof(rdma_ucm_event_resp::reserved) - sizeof(rdma_ucm_event_resp::ece);

}  // namespace detail

inline constexpr std::array<CommandInfo, 23> kCommands = {{
    detail::answered<rdma_ucm_create_id>(RDMA_USER_CM_CMD_CREATE_ID, "CREATE_ID", sizeof(rdma_ucm_create_id_resp)),
    detail::answered<rdma_ucm_destroy_id>(RDMA_USER_CM_CMD_DESTROY_ID, "DESTROY_ID", sizeof(rdma_ucm_destroy_id_resp)),
    // bind_ip has a `response` field the kernel never writes to.
    detail::plain<rdma_ucm_bind_ip>(RDMA_USER_CM_CMD_BIND_IP, "BIND_IP"),
    detail::plain<rdma_ucm_resolve_ip>(RDMA_USER_CM_CMD_RESOLVE_IP, "RESOLVE_IP"),
    detail::plain<rdma_ucm_resolve_route>(RDMA_USER_CM_CMD_RESOLVE_ROUTE, "RESOLVE_ROUTE"),
    // The kernel takes an `out` that stops before ibdev_index (librdmacm then matches by GUID).
    detail::answered<rdma_ucm_query>(RDMA_USER_CM_CMD_QUERY_ROUTE, "QUERY_ROUTE",
                                     offsetof(rdma_ucm_query_route_resp, ibdev_index)),
    detail::plain<rdma_ucm_connect>(RDMA_USER_CM_CMD_CONNECT, "CONNECT"),
    detail::plain<rdma_ucm_listen>(RDMA_USER_CM_CMD_LISTEN, "LISTEN"),
    detail::plain<rdma_ucm_accept>(RDMA_USER_CM_CMD_ACCEPT, "ACCEPT"),
    detail::plain<rdma_ucm_reject>(RDMA_USER_CM_CMD_REJECT, "REJECT"),
    detail::plain<rdma_ucm_disconnect>(RDMA_USER_CM_CMD_DISCONNECT, "DISCONNECT"),
    detail::answered<rdma_ucm_init_qp_attr>(RDMA_USER_CM_CMD_INIT_QP_ATTR, "INIT_QP_ATTR", sizeof(ib_uverbs_qp_attr)),
    detail::answered<rdma_ucm_get_event>(RDMA_USER_CM_CMD_GET_EVENT, "GET_EVENT", detail::kEventMinOut),
    {RDMA_USER_CM_CMD_GET_OPTION, "GET_OPTION", 0, kNoResponse, 0, false},
    detail::plain<rdma_ucm_set_option>(RDMA_USER_CM_CMD_SET_OPTION, "SET_OPTION"),
    detail::plain<rdma_ucm_notify>(RDMA_USER_CM_CMD_NOTIFY, "NOTIFY"),
    detail::answered<rdma_ucm_join_ip_mcast>(RDMA_USER_CM_CMD_JOIN_IP_MCAST, "JOIN_IP_MCAST",
                                             sizeof(rdma_ucm_create_id_resp)),
    // LEAVE_MCAST is written with a destroy_id structure and answers events_reported.
    detail::answered<rdma_ucm_destroy_id>(RDMA_USER_CM_CMD_LEAVE_MCAST, "LEAVE_MCAST",
                                          sizeof(rdma_ucm_destroy_id_resp)),
    // The kernel's migrate copies its 4 bytes whatever `out` says; it never answers ENOSPC.
    detail::answered<rdma_ucm_migrate_id>(RDMA_USER_CM_CMD_MIGRATE_ID, "MIGRATE_ID", 0),
    // QUERY's bound depends on its option: min_out_for() below.
    detail::answered<rdma_ucm_query>(RDMA_USER_CM_CMD_QUERY, "QUERY", 0),
    detail::plain<rdma_ucm_bind>(RDMA_USER_CM_CMD_BIND, "BIND"),
    detail::plain<rdma_ucm_resolve_addr>(RDMA_USER_CM_CMD_RESOLVE_ADDR, "RESOLVE_ADDR"),
    detail::answered<rdma_ucm_join_mcast>(RDMA_USER_CM_CMD_JOIN_MCAST, "JOIN_MCAST", sizeof(rdma_ucm_create_id_resp)),
}};

constexpr bool table_in_command_order() {
  for (std::size_t i = 0; i < kCommands.size(); ++i)
    if (kCommands[i].command != i) return false;
  return true;
}
static_assert(table_in_command_order(), "kCommands[i] must describe command i");
static_assert(kCommands.size() == RDMA_USER_CM_CMD_JOIN_MCAST + 1, "every command of ABI 4, no more");
// The largest body, CONNECT/ACCEPT's, must fit a frame with room left for SET_OPTION's value.
static_assert(sizeof(rdma_ucm_accept) == 296 && sizeof(rdma_ucm_connect) == 288);
static_assert(offsetof(rdma_ucm_create_id, response) == 8 && offsetof(rdma_ucm_get_event, response) == 0);

// The command's entry; nullptr for a number the kernel refuses with EINVAL.
constexpr const CommandInfo* command_info(std::uint32_t command) {
  return command < kCommands.size() ? &kCommands[command] : nullptr;
}

// The smallest `out` for QUERY, whose answer is an address or a path record list by option
// (the kernel's ucma_query_addr/_gid and ucma_query_path); an unknown option has no bound
// here, the daemon refuses it as the kernel does (ENOSYS).
constexpr std::size_t query_min_out(std::uint32_t option) {
  switch (option) {
    case RDMA_USER_CM_QUERY_ADDR:
    case RDMA_USER_CM_QUERY_GID: return sizeof(rdma_ucm_query_addr_resp);
    case RDMA_USER_CM_QUERY_PATH: return sizeof(rdma_ucm_query_path_resp);
    default: return 0;
  }
}

}  // namespace rrdma::ucma_shim
