// The control protocol over a real socketpair(AF_UNIX, SOCK_SEQPACKET): every message
// round-trips with its fds, passed fds arrive usable, and hostile frames are refused without
// leaking a single fd.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "verbs/contract/control_protocol.h"

namespace {

using namespace rrdma;
using namespace rrdma::verbs::control;

struct SocketPair {
  int a = -1;
  int b = -1;
  SocketPair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) == 0);
    a = fds[0];
    b = fds[1];
  }
  ~SocketPair() {
    ::close(a);
    ::close(b);
  }
};

std::size_t open_fd_count() {
  std::size_t count = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  REQUIRE(dir != nullptr);
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count;
}

// Sends raw bytes and raw fds, bypassing the codec, as a hostile peer would.
void send_raw(int fd, ByteSpan bytes, const std::vector<int>& fds) {
  iovec iov{const_cast<std::uint8_t*>(bytes.data()), bytes.size()};
  msghdr header{};
  header.msg_iov = &iov;
  header.msg_iovlen = 1;
  std::vector<std::uint8_t> control(CMSG_SPACE(sizeof(int) * fds.size()) + 8);
  if (!fds.empty()) {
    header.msg_control = control.data();
    header.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* cmsg = CMSG_FIRSTHDR(&header);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  }
  REQUIRE(::sendmsg(fd, &header, 0) == static_cast<ssize_t>(bytes.size()));
}

std::vector<std::uint8_t> frame_of(const Message& message) {
  std::vector<std::uint8_t> bytes(kMaxFrameLength);
  bytes.resize(emit(message, bytes));
  return bytes;
}

std::vector<int> make_eventfds(std::size_t n) {
  std::vector<int> fds;
  for (std::size_t i = 0; i < n; ++i) fds.push_back(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  return fds;
}

void close_all(const std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
}

}  // namespace

TEST_CASE("control: every request and reply round-trips over SOCK_SEQPACKET with its fds") {
  SocketPair pair;
  for (std::uint16_t base = 1; base <= kMessageTypeCount; ++base) {
    const auto type = static_cast<MessageType>(base);
    for (const bool reply : {false, true}) {
      INFO(message_name(type) << (reply ? " reply" : " request"));
      Message sent = reply ? make_reply(type, 1000u + base, 22) : make_request(type, 7u * base);
      for (std::size_t i = 0; i < sent.words.size(); ++i) {
        sent.words[i] = 0x0102030405060708ull * (i + 1) + base;
      }
      const MessageShape shape = *shape_of(sent.wire_type);
      const std::vector<int> fds = make_eventfds(shape.fds);
      REQUIRE(send_message(pair.a, sent, fds) == IoError::None);
      close_all(fds);
      Received got = receive_message(pair.b);
      REQUIRE(got.error == IoError::None);
      CHECK(got.message.wire_type == sent.wire_type);
      CHECK(got.message.is_reply() == reply);
      CHECK(got.message.type() == type);
      CHECK(got.message.request_id == sent.request_id);
      CHECK(got.message.words == sent.words);
      CHECK(got.fds.size() == shape.fds);
    }
  }
}

TEST_CASE("control: the wire layout is the documented one") {
  Message message = make_request(MessageType::DestroyQp, 0xA1B2C3D4);
  message.words[field::kDestroyHandle] = 0x1122334455667788ull;
  const std::vector<std::uint8_t> bytes = frame_of(message);
  const std::vector<std::uint8_t> expected{0x89, 'R',  'V',  'C',  0x00, 0x04, 0x00, 14,
                                           0xA1, 0xB2, 0xC3, 0xD4, 0x00, 0x00, 0x00, 8,
                                           0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88};
  CHECK(bytes == expected);
  CHECK_FALSE(is_admin_json(bytes));
  const std::string admin = R"({"cmd":"status"})";
  CHECK(is_admin_json(ByteSpan(reinterpret_cast<const std::uint8_t*>(admin.data()), admin.size())));
  Message parsed;
  CHECK(parse(ByteSpan(reinterpret_cast<const std::uint8_t*>(admin.data()), admin.size()), 0,
              parsed) == DecodeError::BadMagic);
}

TEST_CASE("control: a memfd and an eventfd passed with create_cq arrive usable") {
  SocketPair pair;
  const int memfd = ::memfd_create("control-test-ring", MFD_CLOEXEC);
  REQUIRE(memfd >= 0);
  REQUIRE(::ftruncate(memfd, 4096) == 0);
  auto* mine = static_cast<std::uint8_t*>(
      ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0));
  REQUIRE(mine != MAP_FAILED);
  const int doorbell = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  REQUIRE(doorbell >= 0);

  Message request = make_request(MessageType::CreateCq, 5);
  request.words[field::kCqEntries] = 64;
  request.words[field::kCqRingBytes] = 4096;
  const std::array<int, 2> fds{memfd, doorbell};
  REQUIRE(send_message(pair.a, request, fds) == IoError::None);
  Received got = receive_message(pair.b);
  REQUIRE(got.error == IoError::None);
  REQUIRE(got.fds.size() == 2);
  CHECK(::fcntl(got.fds.at(0), F_GETFD) == FD_CLOEXEC);

  auto* theirs = static_cast<std::uint8_t*>(
      ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, got.fds.at(0), 0));
  REQUIRE(theirs != MAP_FAILED);
  theirs[100] = 0x5A;
  CHECK(mine[100] == 0x5A);
  ::munmap(theirs, 4096);
  ::munmap(mine, 4096);

  const std::uint64_t one = 1;
  REQUIRE(::write(got.fds.at(1), &one, sizeof(one)) == sizeof(one));
  std::uint64_t count = 0;
  REQUIRE(::read(doorbell, &count, sizeof(count)) == sizeof(count));
  CHECK(count == 1);
  ::close(memfd);
  ::close(doorbell);
}

TEST_CASE("control: hostile frames are refused and leak no fd") {
  SocketPair pair;
  const std::size_t before = open_fd_count();

  Message create_cq = make_request(MessageType::CreateCq, 9);
  const std::vector<std::uint8_t> good = frame_of(create_cq);

  struct Case {
    const char* name;
    std::vector<std::uint8_t> bytes;
    std::size_t fd_count;
    IoError error;
    DecodeError decode;
  };
  std::vector<Case> cases;
  cases.push_back({"truncated header", {good.begin(), good.begin() + 10}, 2, IoError::Malformed,
                   DecodeError::Truncated});
  std::vector<std::uint8_t> short_body(good.begin(), good.end() - 8);
  cases.push_back({"truncated body", short_body, 2, IoError::Malformed,
                   DecodeError::LengthMismatch});
  std::vector<std::uint8_t> lying = good;
  lying[15] = static_cast<std::uint8_t>(lying[15] + 8);
  cases.push_back({"lying length", lying, 2, IoError::Malformed, DecodeError::LengthMismatch});
  std::vector<std::uint8_t> padded = good;
  padded.insert(padded.end(), 8, 0);
  padded[15] = static_cast<std::uint8_t>(padded[15] + 8);
  cases.push_back({"body longer than the type's", padded, 2, IoError::Malformed,
                   DecodeError::WrongBodyLength});
  std::vector<std::uint8_t> unknown = good;
  unknown[7] = 99;
  cases.push_back({"unknown type", unknown, 2, IoError::Malformed, DecodeError::UnknownType});
  std::vector<std::uint8_t> magic = good;
  magic[0] = '{';
  cases.push_back({"bad magic", magic, 2, IoError::Malformed, DecodeError::BadMagic});
  std::vector<std::uint8_t> version = good;
  version[5] = kVersion + 1;
  cases.push_back({"bad version", version, 2, IoError::Malformed, DecodeError::BadVersion});
  cases.push_back({"one fd too few", good, 1, IoError::Malformed, DecodeError::WrongFdCount});
  cases.push_back({"an extra fd", good, 3, IoError::Malformed, DecodeError::WrongFdCount});
  cases.push_back({"more fds than any message", good, kMaxFdsPerMessage + 1,
                   IoError::TooManyFds, DecodeError::None});
  cases.push_back({"far more fds than room", good, 12, IoError::FdsTruncated, DecodeError::None});
  std::vector<std::uint8_t> huge = good;
  huge.resize(kMaxFrameLength + 1);
  cases.push_back({"longer than any frame", huge, 2, IoError::Truncated, DecodeError::None});

  for (const Case& c : cases) {
    INFO(c.name);
    const std::vector<int> fds = make_eventfds(c.fd_count);
    send_raw(pair.a, c.bytes, fds);
    close_all(fds);
    Received got = receive_message(pair.b);
    CHECK(got.error == c.error);
    CHECK(got.decode_error == c.decode);
    CHECK(got.fds.size() == 0);
    CHECK(open_fd_count() == before);
  }

  // The socket still works after all that: a good frame follows.
  const std::vector<int> fds = make_eventfds(2);
  send_raw(pair.a, good, fds);
  close_all(fds);
  {
    Received got = receive_message(pair.b);
    CHECK(got.error == IoError::None);
    CHECK(got.fds.size() == 2);
  }
  CHECK(open_fd_count() == before);
}

TEST_CASE("control: send refuses more fds than the bound") {
  SocketPair pair;
  const std::vector<int> fds = make_eventfds(kMaxFdsPerMessage + 1);
  CHECK(send_message(pair.a, make_request(MessageType::CreateCq, 1), fds) == IoError::TooManyFds);
  close_all(fds);
}

TEST_CASE("control: a closed peer and an empty non-blocking socket are told apart") {
  SocketPair pair;
  REQUIRE(::fcntl(pair.b, F_SETFL, O_NONBLOCK) == 0);
  CHECK(receive_message(pair.b).error == IoError::WouldBlock);
  ::shutdown(pair.a, SHUT_WR);
  CHECK(receive_message(pair.b).error == IoError::PeerClosed);
}

TEST_CASE("control: type numbers outside the catalogue and fds on replies are refused") {
  for (const std::uint16_t wire_type : {std::uint16_t{0}, std::uint16_t{kMessageTypeCount + 1}, kReplyBit,
                                        static_cast<std::uint16_t>(kReplyBit | (kMessageTypeCount + 1))}) {
    INFO(wire_type);
    Message message = make_request(MessageType::DestroyQp, 3);
    message.wire_type = wire_type;
    Message parsed;
    CHECK(parse(frame_of(message), 0, parsed) == DecodeError::UnknownType);
  }
  for (std::uint16_t base = 1; base <= kMessageTypeCount; ++base) {
    const auto type = static_cast<MessageType>(base);
    INFO(message_name(type));
    Message parsed;
    CHECK(parse(frame_of(make_reply(type, 1, 0)), 1, parsed) == DecodeError::WrongFdCount);
    CHECK(parse(frame_of(make_reply(type, 1, 0)), 0, parsed) == DecodeError::None);
  }
}
