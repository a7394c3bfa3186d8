// The frames between the rdma_cm shim (verbs/app/ucma, preloaded into the application by
// `rrdma-vnic exec`) and the vnic's daemon, which serves the kernel interface Debian's
// librdmacm speaks: the ucma ABI, version 4, of <rdma/rdma_user_cm.h> (docs/RDMA_CM.md).
//
// Two kinds of socket carry them:
//   - the command connection: one SOCK_SEQPACKET connection per process to the daemon's
//     control socket (/run/rrdma/NAME.sock), the same socket the verbs client uses, told
//     apart by the magic. Request, reply, one at a time (the shim holds a mutex).
//   - one event channel per open() of /dev/infiniband/rdma_cm: a socketpair the daemon makes
//     for CreateChannel, keeping one end and sending the other with its reply; that end is the
//     descriptor the application holds (and polls). The daemon makes it so that a channel is
//     always what it should be: a descriptor the application chose could be anything (an
//     O_PATH file the daemon cannot poll, an eventfd that never reports EOF). The daemon writes only one-byte markers on it, one per queued
//     event, at most kMaxMarkers unconsumed; the shim receives one marker before each
//     GET_EVENT it sends (blocking or not as the descriptor's O_NONBLOCK says). The channel
//     ends when the daemon reads EOF on its end: the last application descriptor is closed,
//     as the kernel's ucma_close runs on the file's last reference.
//
// A frame: a 40-byte header, then `body length` bytes.
//   0  magic 0x89 'R' 'C' 'M'     4  version (16)      6  kind (16; a reply has kReplyBit)
//   8  request id (32)            12 command (32): RDMA_USER_CM_CMD_*, for kind Command
//   16 channel token (64)         24 aux token (64): MIGRATE_ID's source channel
//   32 status (32): in a reply, 0 or a positive errno
//   36 body length (32), at most kMaxUcmaBody
// Integers are big-endian; the body is the ucma structure's bytes as the application wrote
// them (host order, the ABI's own layout).
//
//   CreateChannel: request carries no fd, empty body; a successful reply carries one fd (the
//                  application's end of the socketpair) and its channel token names the
//                  channel from then on.
//   Command:       `channel token` is the channel the command was written on; the body is
//                  what followed the 8-byte struct ucma_abi_cmd_hdr in the write() (its
//                  `response` pointer is meaningless to the daemon). SET_OPTION: the optlen
//                  bytes at optval are appended to the body. MIGRATE_ID: the shim puts the
//                  token of the channel open on `fd` into `aux token`. The reply's body is
//                  the response structure (the shim copies min(out, body length) bytes to
//                  `response`). GET_EVENT with nothing queued (a marker whose event was
//                  purged by DESTROY_ID or MIGRATE_ID) replies EAGAIN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "stack/bytes.h"
#include "verbs/contract/control_protocol.h"

namespace rrdma::verbs::ucma {

inline constexpr std::uint32_t kMagic = 0x8952434D;  // 0x89 'R' 'C' 'M'
inline constexpr std::uint16_t kVersion = 2;  // 2: the daemon makes the channel's socketpair
inline constexpr std::size_t kHeaderLength = 40;
// The largest ucma body is CONNECT/ACCEPT's (296 bytes) plus a SET_OPTION value; the largest
// response is rdma_ucm_event_resp (336 bytes).
inline constexpr std::size_t kMaxUcmaBody = 1024;
inline constexpr std::size_t kMaxFrameLength = kHeaderLength + kMaxUcmaBody;
inline constexpr std::uint16_t kReplyBit = 0x8000;
// Markers the daemon leaves unconsumed on a channel before it waits for GET_EVENTs.
inline constexpr std::size_t kMaxMarkers = 32;
// The device node librdmacm opens, and the ABI version it is served at.
inline constexpr const char* kDevicePath = "/dev/infiniband/rdma_cm";
inline constexpr std::uint32_t kAbiVersion = 4;

// The event numbers of the ABI (enum rdma_cm_event_type, rdma/rdma_cm.h in the kernel and
// rdma/rdma_cma.h in librdmacm; the uapi header does not carry them).
enum EventCode : std::uint32_t {
  kAddrResolved = 0, kAddrError = 1, kRouteResolved = 2, kRouteError = 3, kConnectRequest = 4,
  kConnectResponse = 5, kConnectError = 6, kUnreachable = 7, kRejected = 8, kEstablished = 9,
  kDisconnected = 10, kDeviceRemoval = 11, kMulticastJoin = 12, kMulticastError = 13,
  kAddrChange = 14, kTimewaitExit = 15
};

enum class Kind : std::uint16_t { CreateChannel = 1, Command = 2 };

struct Frame {
  Kind kind = Kind::Command;
  bool reply = false;
  std::uint32_t request_id = 0;
  std::uint32_t command = 0;
  std::uint64_t channel = 0;
  std::uint64_t aux_channel = 0;
  std::uint32_t status = 0;
  std::vector<std::uint8_t> body;
};

// True if `bytes` (at least 4) start with this protocol's magic.
bool is_ucma_frame(ByteSpan bytes);

enum class DecodeError : std::uint8_t {
  None, Truncated, BadMagic, BadVersion, UnknownKind, LengthMismatch, TooLong, WrongFdCount
};
const char* decode_error_name(DecodeError error);

// Writes `frame` into `out` (at least kHeaderLength + body size); returns the bytes used, 0
// if the body is longer than kMaxUcmaBody.
std::size_t emit(const Frame& frame, MutableByteSpan out);
// Checks what a hostile peer could lie about (a successful CreateChannel reply carries
// exactly one fd, anything else none) and parses.
DecodeError parse(ByteSpan bytes, std::size_t fd_count, Frame& out);

// Sends one frame, with `fd` as SCM_RIGHTS when it is not -1. errno kept on System.
control::IoError send_frame(int socket_fd, const Frame& frame, int fd = -1);

struct Received {
  control::IoError error = control::IoError::None;
  DecodeError decode_error = DecodeError::None;
  Frame frame;
  control::ReceivedFds fds;  // empty unless error == None
};
// Receives and parses one frame (MSG_CMSG_CLOEXEC); on any error every fd that came is closed.
Received receive_frame(int socket_fd);

}  // namespace rrdma::verbs::ucma
