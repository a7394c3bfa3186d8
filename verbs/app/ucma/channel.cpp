// Runs in the application process (the rdma_cm shim, librrdma_ucma.so).
#include "verbs/app/ucma/channel.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "verbs/app/ucma/commands.h"
#include "verbs/app/ucma/daemon_link.h"
#include "verbs/app/ucma/real_libc.h"
#include "verbs/app/ucma/user_memory.h"

namespace rrdma::ucma_shim {
namespace {

namespace ucma = verbs::ucma;

int fail(int error) {
  errno = error;
  return -1;
}

std::uint64_t address_of(const void* pointer, std::size_t offset = 0) {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(pointer)) + offset;
}

// One write() taken apart: its header, the body the daemon gets, where the answer goes.
struct Command {
  const CommandInfo* info = nullptr;
  rdma_ucm_cmd_hdr header{};
  std::vector<std::uint8_t> body;
  std::uint64_t response = 0;
};

template <typename Field>
bool body_field(const Command& command, std::size_t offset, Field& out) {
  if (command.body.size() < offset + sizeof(Field)) return false;
  std::memcpy(&out, command.body.data() + offset, sizeof(Field));
  return true;
}

std::size_t min_out_of(const Command& command) {
  if (command.header.cmd != RDMA_USER_CM_CMD_QUERY) return command.info->min_out;
  std::uint32_t option = 0;
  return body_field(command, offsetof(rdma_ucm_query, option), option) ? query_min_out(option) : 0;
}

// The checks ucma_write and the command's handler make before anything happens. The body is
// the structure's bytes the application wrote: `in` of them, at most the structure's size
// (the kernel reads no further either).
int read_command(const void* buffer, std::size_t length, Command& command) {
  if (length < sizeof(rdma_ucm_cmd_hdr)) return EINVAL;
  if (copy_from_application(&command.header, address_of(buffer), sizeof(command.header)) != 0) return EFAULT;
  if (command.header.in + sizeof(rdma_ucm_cmd_hdr) > length) return EINVAL;
  command.info = command_info(command.header.cmd);
  if (command.info == nullptr) return EINVAL;
  if (!command.info->served) return ENOSYS;
  command.body.resize(std::min<std::size_t>(command.header.in, command.info->body_size));
  if (copy_from_application(command.body.data(), address_of(buffer, sizeof(rdma_ucm_cmd_hdr)), command.body.size()) != 0)
    return EFAULT;
  if (command.info->response_at == kNoResponse) return 0;
  if (!body_field(command, static_cast<std::size_t>(command.info->response_at), command.response)) return EINVAL;
  return command.header.out < min_out_of(command) ? ENOSPC : 0;
}

// SET_OPTION's value is behind a user pointer: its bytes travel after the structure.
int append_option_value(Command& command) {
  rdma_ucm_set_option option{};
  if (!body_field(command, 0, option)) return EINVAL;
  if (option.optlen > ucma::kMaxUcmaBody - command.body.size()) return EINVAL;
  const std::size_t at = command.body.size();
  command.body.resize(at + option.optlen);
  return copy_from_application(command.body.data() + at, option.optval, option.optlen);
}

// MIGRATE_ID names its source channel by descriptor number; the daemon knows it by token.
// As the kernel's fdget/f_op checks: no such descriptor is ENOENT, another kind of file EINVAL.
int migrate_source(const Command& command, std::uint64_t& token) {
  std::uint32_t fd = 0;
  if (!body_field(command, offsetof(rdma_ucm_migrate_id, fd), fd)) return EINVAL;
  const int source = static_cast<int>(fd);
  if (const auto channel = verified_channel(source)) {
    token = channel->token;
    return 0;
  }
  return ::fcntl(source, F_GETFD) == -1 ? ENOENT : EINVAL;
}

int complete_frame(Command& command, ucma::Frame& frame) {
  if (command.header.cmd == RDMA_USER_CM_CMD_SET_OPTION) {
    if (const int error = append_option_value(command); error != 0) return error;
  }
  if (command.header.cmd == RDMA_USER_CM_CMD_MIGRATE_ID) {
    if (const int error = migrate_source(command, frame.aux_channel); error != 0) return error;
  }
  frame.body = std::move(command.body);
  return 0;
}

// One marker the daemon wrote for a queued event, received as the descriptor's own flags
// say: blocking, or EAGAIN under O_NONBLOCK; a signal gives EINTR, as the kernel's wait does.
int take_marker(int fd) {
  char marker = 0;
  const ssize_t received = ::recv(fd, &marker, 1, 0);
  if (received == 1) return 0;
  if (received == 0) return ENODEV;  // the daemon's end is closed: it died
  return errno;
}

// GET_EVENT without the command mutex held while waiting, so that other threads' commands
// on this channel go on (rping's cm thread waits here while its main thread accepts). A
// marker whose event DESTROY_ID or MIGRATE_ID purged is answered EAGAIN: wait for the next.
// The wait holds its own descriptor of the channel, as the kernel holds the file during a
// write: another thread may close the application's number meanwhile (and the number be
// reused by another file), and a stale marker sends us back to receive again.
DaemonReply fetch_event(int fd, const ucma::Frame& frame) {
  const int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return {errno, 0, -1, {}};
  DaemonReply reply{};
  for (;;) {
    if (const int error = take_marker(own); error != 0) {
      reply = {error, 0, -1, {}};
      break;
    }
    reply = call_daemon(frame);
    if (reply.error != EAGAIN) break;
  }
  real::close(own);
  return reply;
}

int copy_response(const Command& command, const std::vector<std::uint8_t>& answer) {
  if (command.info->response_at == kNoResponse) return 0;
  const std::size_t length = std::min<std::size_t>(command.header.out, answer.size());
  return copy_to_application(command.response, answer.data(), length);
}

}  // namespace

int open_channel(int flags) {
  ucma::Frame request;
  request.kind = ucma::Kind::CreateChannel;
  const DaemonReply reply = call_daemon(request);
  if (reply.error != 0) return fail(reply.error);
  const int application_end = reply.fd;  // the daemon made the pair and keeps the other end
  struct stat st {};
  const bool usable = application_end < kMaxTrackedFd && real::fstat(application_end, &st) == 0;
  if (!usable) {
    real::close(application_end);  // EOF on the daemon's end closes the channel there
    return fail(EMFILE);
  }
  // The flags are the application end's own; the daemon sets its end's as it likes.
  if ((flags & O_CLOEXEC) == 0) ::fcntl(application_end, F_SETFD, 0);
  if ((flags & O_NONBLOCK) != 0) ::fcntl(application_end, F_SETFL, O_NONBLOCK);
  remember_channel(application_end, {reply.channel, st.st_dev, st.st_ino, (flags & O_ACCMODE) != O_RDONLY});
  return application_end;
}

ssize_t write_command(int fd, const ChannelRecord& channel, const void* buffer, std::size_t length) {
  if (!channel.writable) return fail(EBADF);
  Command command;
  if (const int error = read_command(buffer, length, command); error != 0) return fail(error);
  ucma::Frame frame;
  frame.kind = ucma::Kind::Command;
  frame.command = command.header.cmd;
  frame.channel = channel.token;
  if (const int error = complete_frame(command, frame); error != 0) return fail(error);
  const DaemonReply reply =
      frame.command == RDMA_USER_CM_CMD_GET_EVENT ? fetch_event(fd, frame) : call_daemon(frame);
  if (reply.error != 0) return fail(reply.error);
  if (const int error = copy_response(command, reply.body); error != 0) return fail(error);
  return static_cast<ssize_t>(length);
}

}  // namespace rrdma::ucma_shim
