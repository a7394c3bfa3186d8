// What must hold for any bytes a local client sends as a verbs control frame
// (verbs/contract/control_protocol.h), shared by the libFuzzer target (fuzz_control_frame.cpp) and the
// ctest replay of its findings (control_regressions_test.cpp).
//
// Input: byte 0 says how many fds travel with the frame (its low 3 bits, 0..7: up to three
// more than any message may carry, so the count can lie both ways); the rest is the frame.
//  - parse() returns; it accepts a frame only if it is exactly one known type's header and
//    body with that type's fd count, and re-emitting what it accepted gives the same bytes
//    (nothing of the frame was ignored or invented);
//  - the frame sent over a SOCK_SEQPACKET socketpair with that many fds: receive_message()
//    accepts it exactly when parse() does, hands over exactly the fds that came, and on
//    every refusal every fd that arrived is closed (no descriptor leaks, whatever the lie).
// Returns a description of the first property that fails, or nullptr.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "verbs/contract/control_protocol.h"

namespace rrdma::fuzz {

// Descriptors this process has open among 0 .. kFdScanLimit-1 (one poll: a closed fd answers
// POLLNVAL). The fuzz targets never hold more than this many.
inline constexpr int kFdScanLimit = 1024;
inline std::vector<int> open_fds() {
  static std::array<pollfd, kFdScanLimit> entries;
  for (int fd = 0; fd < kFdScanLimit; ++fd) entries[static_cast<std::size_t>(fd)] = {fd, 0, 0};
  ::poll(entries.data(), entries.size(), 0);
  std::vector<int> open;
  for (const pollfd& entry : entries) {
    if ((entry.revents & POLLNVAL) == 0) open.push_back(entry.fd);
  }
  return open;
}

inline const char* check_parse(ByteSpan frame, std::size_t fd_count) {
  namespace control = verbs::control;
  control::Message message;
  const control::DecodeError error = control::parse(frame, fd_count, message);
  if (error != control::DecodeError::None) {
    if (std::string_view(control::decode_error_name(error)) == "?") return "parse: an error outside the enum";
    return nullptr;
  }
  const auto shape = control::shape_of(message.wire_type);
  if (!shape) return "parse: accepted an unknown type";
  if (message.words.size() != shape->words) return "parse: word count is not the type's";
  if (fd_count != shape->fds) return "parse: accepted a frame with the wrong fd count";
  if (message.words.size() > control::kMaxBodyWords) return "parse: more words than any frame may hold";
  std::vector<std::uint8_t> again(message.length());
  if (control::emit(message, again) != frame.size() || !std::equal(again.begin(), again.end(), frame.begin(), frame.end())) {
    return "parse: re-emitting the accepted message gives other bytes";
  }
  return nullptr;
}

// A connected SOCK_SEQPACKET pair, made once per process (the daemon's side is `server`).
struct SocketPair {
  int client = -1;
  int server = -1;
  static SocketPair& get() {
    static SocketPair pair = [] {
      SocketPair p;
      int fds[2];
      if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) == 0) {
        p.client = fds[0];
        p.server = fds[1];
        ::fcntl(p.server, F_SETFL, O_NONBLOCK);
      }
      return p;
    }();
    return pair;
  }
};

inline const char* check_receive(ByteSpan frame, std::size_t fd_count) {
  namespace control = verbs::control;
  SocketPair& pair = SocketPair::get();
  if (pair.client < 0) return "socketpair failed";
  // An empty message reads as the peer closing (recvmsg returns 0): the daemon drops such a
  // connection, which is right for a client sending nothing. A frame longer than the
  // socket buffer cannot be sent at all.
  if (frame.empty() || frame.size() > 64 * 1024) return nullptr;

  const std::vector<int> before = open_fds();
  std::vector<int> passing;
  for (std::size_t i = 0; i < fd_count; ++i) {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return "open /dev/null failed";
    passing.push_back(fd);
  }
  iovec iov{const_cast<std::uint8_t*>(frame.data()), frame.size()};
  msghdr header{};
  header.msg_iov = &iov;
  header.msg_iovlen = 1;
  alignas(cmsghdr) std::array<std::uint8_t, CMSG_SPACE(sizeof(int) * 8)> control_bytes{};
  if (!passing.empty()) {
    header.msg_control = control_bytes.data();
    header.msg_controllen = CMSG_SPACE(sizeof(int) * passing.size());
    cmsghdr* cmsg = CMSG_FIRSTHDR(&header);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * passing.size());
    std::memcpy(CMSG_DATA(cmsg), passing.data(), sizeof(int) * passing.size());
  }
  const ssize_t sent = ::sendmsg(pair.client, &header, MSG_NOSIGNAL);
  for (int fd : passing) ::close(fd);  // in flight, the socket holds its own references
  if (sent != static_cast<ssize_t>(frame.size())) return "sendmsg failed";

  control::Message parsed;
  const bool parses = control::parse(frame, fd_count, parsed) == control::DecodeError::None;
  const char* failed = nullptr;
  {
    control::Received received = control::receive_message(pair.server);
    if (received.error == control::IoError::None) {
      if (!parses) failed = "receive_message: accepted a frame parse() refuses";
      else if (received.fds.size() != fd_count) failed = "receive_message: handed over another number of fds";
      else if (received.message.wire_type != parsed.wire_type || received.message.words != parsed.words ||
               received.message.request_id != parsed.request_id) {
        failed = "receive_message: a message other than parse()'s";
      }
      for (std::size_t i = 0; i < received.fds.size() && !failed; ++i) {
        if (::fcntl(received.fds.at(i), F_GETFD) < 0) failed = "receive_message: handed over a closed fd";
      }
    } else {
      if (parses && frame.size() <= control::kMaxFrameLength) failed = "receive_message: refused a frame parse() accepts";
      if (received.fds.size() != 0) failed = "receive_message: kept fds of a refused frame";
    }
  }  // `received` closes what it holds
  if (failed) return failed;
  // Nothing may stay queued (one frame, one recvmsg) nor open.
  std::uint8_t byte = 0;
  if (::recv(pair.server, &byte, 1, MSG_DONTWAIT) >= 0) return "a frame left bytes queued on the socket";
  if (open_fds() != before) return "receive_message: a descriptor leaked";
  return nullptr;
}

inline const char* check_control_frame(ByteSpan input) {
  if (input.empty()) return nullptr;
  const std::size_t fd_count = input[0] & 7u;
  const ByteSpan frame = input.subspan(1);
  if (const char* failed = check_parse(frame, fd_count)) return failed;
  return check_receive(frame, fd_count);
}

}  // namespace rrdma::fuzz
